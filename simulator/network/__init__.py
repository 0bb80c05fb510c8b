"""Network layer: the bandwidth-sharing solver and the fabrics built on it."""
