"""jax.errors of the test double."""


class JaxRuntimeError(RuntimeError):
    """As jaxlib's: a RuntimeError carrying XLA's status text."""
