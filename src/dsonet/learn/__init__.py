"""Learning experiences from rollouts: LLM back ends, tasks and verifiers, training-free GRPO."""
