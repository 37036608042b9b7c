"""gpumemtrace's viewer: terminal summary, HTML report, diff and merge of
snapshots, and exports to Perfetto, speedscope and PyTorch's memory viewer
(docs/viewer.md). Standard library only, Python 3.9 or newer."""
