"""The seed's ``kernel.logical`` namespace: ``logical.axis``, ``logical.Program``, ``logical.schedule``."""

from .dsl import schedule
from .dsl.traced import axis
from .program import Program

__all__ = ["axis", "Program", "schedule"]
