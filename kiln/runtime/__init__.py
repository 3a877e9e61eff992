"""The runtime: dtypes, devices, strided tensors over numpy (or CUDA) buffers, RNG and per-thread
state — the lowest layer, which every other one builds on and which imports none of them."""
