"""vllm-advisor: a Prometheus exporter and tuning advisor for vLLM."""

__version__ = "0.1.0"
