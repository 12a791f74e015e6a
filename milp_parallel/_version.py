"""The version of milp_parallel alone: package modules read it without importing the face."""

__version__ = "0.1.0"
