"""clustersim: a discrete-event simulator of GPU clusters and their network fabrics."""

__version__ = "0.1.0"
