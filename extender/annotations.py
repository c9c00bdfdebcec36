"""Every resource name, annotation and Redis key the project reads or writes, in one place."""

# Resources a pod asks for.
RES_WHOLE_GPU = "nvidia.com/gpu"
RES_GPU_MILLI = "sparse.io/gpu-milli"  # compute share of one GPU, 1..1000
RES_GPU_MEM = "sparse.io/gpu-mem"  # MiB of one GPU
MANAGED_RESOURCES = (RES_WHOLE_GPU, RES_GPU_MILLI, RES_GPU_MEM)

# Pod annotations read by the extender.
ANN_GPU_MODEL = "sparse.io/gpu-model"  # allowed models, "|"-separated: "V100M16|V100M32"
ANN_JOB_CLASS = "sparse.io/job-class"  # recommendation, cnn, transformer, rnn, rl, gan, ...
ANN_GANG_SLOT = "sparse.io/gang-slot"  # the gang slot (ledger UID) a job's worker binds to
# The job's solo profile, as measured alone (a previous run's metrics):
# "<GPU util %>,<memory-controller util %>,<GPU memory MiB>"; the learned pair model uses it.
ANN_SOLO_PROFILE = "sparse.io/solo-profile"
# The job's predicted run time in seconds (the job controller: declared steps x predicted step
# time); a held node takes a pod only if it is predicted to end first (placement/holds.py).
ANN_PREDICTED_SECONDS = "sparse.io/predicted-seconds"

# Pod annotations written at bind.
ANN_GPU_UUIDS = "sparse.io/gpu-uuids"  # comma-separated UUIDs of every GPU the pod got
ANN_ASSIGNMENT = "sparse.io/assignment"  # JSON: per-container detail, see docs/requests.md
ANN_NODE = "sparse.io/node"  # node the assignment was made for

# Node annotation carrying the GPU inventory (published by the node agent).
ANN_GPU_INVENTORY = "sparse.io/gpu-inventory"

# Redis hash with a predicted demand, written by the predictor worker for pods that carry one
# of these annotations (the model's structure) and for no other pod.
DEMAND_KEY_PREFIX = "sparse:demand:"
ANN_MODEL = "sparse.io/model"
ANN_TASK_INFO = "kube-gpu-sparse/task_info"
PREDICTED_ANNOTATIONS = (ANN_MODEL, ANN_TASK_INFO)

# Data locality (extender/placement/locality.py, embed/).
ANN_EMBEDDING = "sparse.io/embedding"  # pod: JSON {store, tables, hotRows?, required?}
ANN_EMBEDDING_CACHE = "sparse.io/embedding-cache"  # node: what its embedding cache holds
LABEL_EMBEDDING_STORE = "sparse.io/embedding-store"  # store shard pods: the store's name
LABEL_ZONE = "topology.kubernetes.io/zone"
DEFAULT_RACK_LABEL = "topology.sparse.io/rack"
