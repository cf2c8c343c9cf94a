"""The `openai` LLM backend: the robust structured-output client (`client`), strict JSON schemas
from the pydantic reply models (`schema`), the prompts (`prompts`), and `lychee-ray serve`, which
starts the vLLM server they talk to (`serve`). What to ask and when is decided by ingest, query
and evaluate; the `rules` backend (`lychee_ray.rules`) stands in when there is no LLM.
"""
