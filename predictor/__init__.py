"""Resource-demand predictor: GPU memory and compute share of a training job from its structure.

Layers (lower layers never import higher ones):

  pure core   features (schema + feature vector), gpus (catalogue), memory_model,
              compute_model, predictor (load artefacts, predict), evaluation
  adapters    worker (Kubernetes watch, Redis writer, metrics), cli
  generator   dataset, generate.* : the only modules that import torch, and only lazily
"""

MODEL_VERSION = "v9"
