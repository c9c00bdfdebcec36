"""Resource-demand predictor: GPU memory and compute share of a training job from its structure.

Layers (lower layers never import higher ones):

  pure core   schema (annotation), features (feature vector; activations, step_time),
              gpus (catalogue), memory_model (memory_phases, reservation, allowance),
              caching_allocator, compute_model, estimate (load artefacts, predict),
              training, evaluation
  adapters    worker (Kubernetes watch, Redis writer, metrics), cli
  generator   dataset, generate.* : the only modules that import torch, and only lazily
"""

MODEL_VERSION = "v9"
