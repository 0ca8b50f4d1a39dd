"""ouroboros: an unattended LLM agent harness for local models with small context windows."""
