"""Collectives written on point-to-point send/recv, and the bytes they move (layer 3 and 4)."""
from labkit.comm import traffic
