"""The homegrown async controller runtime. It knows nothing of GPUs, NFD or Kueue."""
