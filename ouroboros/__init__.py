"""ouroboros: an unattended LLM agent harness for local models with small context windows."""

from ouroboros import features as features  # the features named: light, and known everywhere
