"""ouroboros: an unattended LLM agent harness for local models with small context windows."""

from ouroboros import features as features  # every journal reader knows the features' records
