"""A training loop with PyTorch's commonest leak: each step's loss kept in a
list, and with it what the step's graph holds, until CUDA runs out of memory.
It is the train.py of README.md's command lines, which tests/docs runs on the
simulated GPU (2 GiB) with the PyTorch test double tests/frameworks/fake_torch,
where a tensor of 24 MiB stands for a loss and its graph; README's first
screen shows gpumemtrace's report of it, checked there."""
import torch

MIB = 1 << 20
model = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
opt = torch.optim.SGD([model], lr=0.01)
losses = []


def forward():
    return [torch.empty(8 * MIB, dtype=torch.uint8, device="cuda") for _ in range(4)]


def train_step():
    activations = forward()
    loss = torch.empty(24 * MIB, dtype=torch.uint8, device="cuda")
    losses.append(loss)
    del activations
    opt.step()


for step in range(1000):
    train_step()
