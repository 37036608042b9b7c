"""torch.optim of the test double: an optimizer whose step() runs the global
step hooks, as PyTorch's does (torch/__init__.py says what it models)."""

from .optimizer import Optimizer  # noqa: F401
