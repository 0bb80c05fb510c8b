"""A layer's backward split as the zero-bubble schedules run it (Qi et al. 2023, arXiv
2401.10241): ``B`` computes the input gradients (every backward kernel but the
weight-gradient GEMMs, ``*.wgrad``), ``W`` the weight gradients, later."""

from __future__ import annotations

from dataclasses import replace

from simulator.models import LayerCost


def input_grad_view(layer: LayerCost) -> LayerCost:
    """The layer's backward without its weight-gradient GEMMs (zero-bubble ``B``)."""
    return replace(layer, backward=tuple(c for c in layer.backward
                                         if not c.name.endswith(".wgrad")))


def kept_for_w(layer: LayerCost) -> int:
    """Saved activations a split backward keeps for its ``W`` pass (the GEMM inputs; taken
    as half of the layer's saved activations, an approximation)."""
    return int(layer.activation_bytes) // 2 if any(
        c.name.endswith(".wgrad") for c in layer.backward) else 0


def weight_grad_view(layer: LayerCost) -> LayerCost:
    """The weight-gradient GEMMs only (zero-bubble ``W``); frees what ``B`` kept."""
    return replace(layer, kind="weight_grad", forward=(),
                   backward=tuple(c for c in layer.backward if c.name.endswith(".wgrad")),
                   activation_bytes=kept_for_w(layer))
