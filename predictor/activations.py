"""Activations a training step keeps for backward, from the model's structure: the family
rules (transformer, CNN, DLRM, MLP-style) and the bounds from the job fields alone. Pure."""

from __future__ import annotations

import math

from predictor.schema import DTYPE_BYTES, ModelSpec

# Fraction of the forward op outputs (``activations``) a CNN keeps for backward, from the block
# structure: conv -> BN -> in-place activation keeps conv and BN outputs (2 of 3 outputs);
# a ResNet basic block (conv, BN, ReLU_, conv, BN, add, ReLU_) keeps 4 of 7; a Darknet
# residual (two conv-BN-LeakyReLU_ + add) keeps 5 of 7.
CNN_SAVED_FRACTION = {"resnet": 4 / 7, "yolo": 5 / 7, "cnn": 2 / 3}
CNN_FAMILIES = tuple(CNN_SAVED_FRACTION)
# YOLOv3 heads (COCO): 3 anchors x (4 box + objectness + 80 classes) channels at strides 8, 16
# and 32, as elements per input element (input = 3 x H x W).
YOLO_HEAD_ELEMS_PER_INPUT = 3 * (5 + 80) * (1 / 64 + 1 / 256 + 1 / 1024) / 3
# Vocabulary-wide tensors alive at the start of a transformer's backward, per token: the
# log-softmax output kept by cross-entropy, the NLL gradient and the log-softmax gradient.
LOSS_VOCAB_TENSORS = 3
OTHER_SAVED_FRACTION = 0.5  # MLP-style nets: a non-in-place activation saves its output only


def transformer_shape(spec: ModelSpec) -> tuple[int, float, int, int, float] | None:
    """(d_model, seq_len, vocab, heads, layers) of a BERT-style encoder described by its token
    table (rows = vocab, dim = d_model, pooling = tokens per sample) and ``params``; heads are
    d/64 (BERT convention), layers solve ``params = tables + head + L (12 d^2 + 13 d)``."""
    if not spec.tables:
        return None
    tok = max(spec.tables, key=lambda t: t.rows * t.dim)
    d, seq, vocab = tok.dim, tok.pooling, tok.rows
    emb = sum(t.rows * t.dim * t.count for t in spec.tables)
    head = d * vocab + vocab
    layers = max(1.0, (spec.params - emb - head) / (12 * d * d + 13 * d)) if spec.params else 1.0
    return d, seq, vocab, max(1, d // 64), layers


def saved_activation_bytes(spec: ModelSpec) -> float:
    """Analytic bytes of the activations kept for backward, per family structure.

    Transformers (post-LN encoder, explicit attention with dropout): per token and layer
    ``b (17 d + 2 h s) + (h s + 2 d)`` (d-wide tensors: LN/qkv/attention/proj/FFN outputs,
    two s-wide attention maps per head, 1-byte dropout masks), plus ``3 V b`` per token for
    the vocabulary-wide loss: cross-entropy keeps the log-softmax output (the logits are freed
    once it exists), and the backward starts by materialising two more tensors of that size
    (the NLL gradient and the log-softmax gradient) while everything saved is still alive.
    CNNs: ``CNN_SAVED_FRACTION`` of the forward op outputs. Others: ``OTHER_SAVED_FRACTION``;
    DLRM adds its dot interaction: the backward of the pairwise-product selection materialises
    a ``B x F x F`` gradient (F = tables + the bottom MLP's output) while the forward's saved
    tensors are still alive.
    """
    b = DTYPE_BYTES[spec.dtype]
    bsz = spec.batch_size
    if spec.saved_bytes is not None:  # measured by describe: no family rule needed
        return bsz * (spec.saved_bytes + (spec.backward_bytes or 0.0))
    if spec.family in ("bert", "transformer"):
        shape = transformer_shape(spec)
        if shape is not None:
            d, seq, vocab, h, layers = shape
            per_tok_layer = b * (17 * d + 2 * h * seq) + (h * seq + 2 * d)
            return bsz * seq * (layers * per_tok_layer + LOSS_VOCAB_TENSORS * vocab * b)
    frac = CNN_SAVED_FRACTION.get(spec.family, OTHER_SAVED_FRACTION)
    saved = frac * bsz * spec.activations * b
    if spec.family == "yolo" and b < 4:
        # the detection loss upcasts every head output to fp32 and keeps that copy for backward
        saved += bsz * YOLO_HEAD_ELEMS_PER_INPUT * spec.inputs * 4
    if spec.family == "dlrm" and spec.tables:
        fields = sum(t.count for t in spec.tables) + 1
        saved += bsz * fields * fields * b
    return saved


def main_dim(spec: ModelSpec) -> float:
    """Embedding width of the largest table (the token / item table of a sequence model)."""
    return float(max(spec.tables, key=lambda t: t.rows * t.dim).dim)



def job_activation_terms(spec: ModelSpec, dense_params: float, b: int) -> dict[str, float]:
    """Activations kept for backward, bounded from the job fields alone (MiB, per batch).

    ``macs / dense parameters`` is how often each weight is used per sample: about 1 for
    the MLPs of a recommendation model, the token count of a transformer, the pixel count of
    a convolution. The MACs up to one use per weight are MLP-like: a layer of width w does w
    MACs per output and w ~ sqrt(parameters), so they keep ``macs / sqrt(dense params)``
    outputs (``mlp_act_mib``). The MACs beyond that are positions reusing the weights; each
    keeps per-position outputs, bounded the same way (``reuse_width_mib``) and, with
    embedding tables, by the table width, the residual stream of a transformer over token
    embeddings (``reuse_dim_mib``). Lookups of one id per table and sample are ``io_mib``.

    With the optional ``leaf_activations`` (the leaf modules' outputs, which a model summary
    counts) the module outputs are known (``leaf_act_mib``) and replace the two width bounds;
    the table-width bound stays, for the functional ops between modules (attention scores,
    interactions) that no module outputs."""
    mib = 1.0 / 2**20
    dense = max(1.0, dense_params or spec.macs)
    first = min(spec.macs, dense)
    reuse = max(0.0, spec.macs - dense)
    per = spec.batch_size * b * mib
    leaf = spec.leaf_activations > 0
    return {
        "mlp_act_mib": 0.0 if leaf else per * first / math.sqrt(dense),
        "reuse_width_mib": 0.0 if leaf else per * reuse / math.sqrt(dense),
        "reuse_dim_mib": per * reuse / main_dim(spec) if spec.tables else 0.0,
        "leaf_act_mib": per * spec.leaf_activations,
    }
