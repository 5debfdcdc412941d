"""What the GPUs did: utilisation and idle reclaim, GPU-hour budgets' model, MIG geometry and card
fractions, right-sizing, GPU health."""
