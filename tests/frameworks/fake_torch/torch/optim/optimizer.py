"""torch.optim.optimizer of the test double: register_optimizer_step_post_hook
(PyTorch 2.0 on), called after every Optimizer.step() with (optimizer,
args, kwargs)."""

import os

_global_post_hooks = {}


class _Handle:
    def __init__(self, key):
        self.key = key

    def remove(self):
        _global_post_hooks.pop(self.key, None)


def register_optimizer_step_post_hook(hook):
    key = len(_global_post_hooks) + 1
    _global_post_hooks[key] = hook
    return _Handle(key)


class Optimizer:
    """Updates nothing: its step runs the hooks."""

    def __init__(self, params=()):
        self.params = list(params)

    def step(self, *args, **kwargs):
        for hook in list(_global_post_hooks.values()):
            hook(self, args, kwargs)


if os.environ.get("FAKE_TORCH_MINIMAL") == "1":
    del register_optimizer_step_post_hook
