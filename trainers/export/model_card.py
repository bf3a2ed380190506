"""The model card of an exported Hugging Face folder: ``README.md`` in the Hub's card format.

YAML metadata first (``base_model``, ``license``, ``library_name``, ``pipeline_tag``, ``tags``: the fields the Hub
reads), then what a person deciding whether to use the model needs: where it started, the data and its lineage,
the recipe the trainer got, the metrics (the sealed test figure first where the run has one: the figure no
deciding step read), how to run it with its chat template, and what the export's read-back found. Rendered with
Jinja2; a fact the run did not record is said to be unknown, never guessed.
"""

from __future__ import annotations

from typing import Any

import yaml
from jinja2 import Environment, StrictUndefined
from pydantic import BaseModel, Field

UNKNOWN_LICENSE = "other"


class CardFacts(BaseModel):
    """What the card says about a registered model, gathered from the registry and the run that made it."""

    model_id: str
    name: str
    base: str | None = Field(default=None, description="the model it started from (a registered id or a folder)")
    license: str | None = Field(default=None, description="the base model's license, where it was found")
    run_id: str | None = None
    data: list[str] = Field(default_factory=list, description="the data files and dataset versions it trained on")
    recipe: dict[str, dict[str, Any]] = Field(default_factory=dict, description="per stage: the trainer's settings")
    metrics: dict[str, float] = Field(default_factory=dict, description="the final evaluation on the dev rows")
    test_metrics: dict[str, float] = Field(default_factory=dict, description="the sealed test part, scored once")
    test_rows: int | None = None
    chat_template: bool = True


_CARD = """---
{{ front_matter }}---

# {{ f.name }}

{% if f.run_id %}Fine-tuned with trainteam from `{{ f.base or "an unknown base" }}`
(registered as `{{ f.model_id }}`, run `{{ f.run_id }}`).
{%- else %}Exported by trainteam; not trained by it
(registered as `{{ f.model_id }}`{% if f.base %} from `{{ f.base }}`{% endif %}).{% endif %}

## Data

{% for d in f.data %}- {{ d }}
{% else %}- not recorded
{% endfor %}
## Recipe

{% for stage, cfg in f.recipe.items() %}- **{{ stage }}**: {{ cfg | dictsort | map("join", " = ") | join(", ") }}
{% else %}- not recorded
{% endfor %}
## Metrics

{% if f.test_metrics %}On the sealed test part ({{ f.test_rows or "?" }} rows no deciding step read), scored once:

| metric | sealed test | dev |
|---|---:|---:|
{% for k, v in f.test_metrics | dictsort %}| {{ k }} | {{ "%.4g" | format(v) }} | {{ dev(k) }} |
{% endfor %}{% elif f.metrics %}On the held-out dev rows:

| metric | value |
|---|---:|
{% for k, v in f.metrics | dictsort %}| {{ k }} | {{ "%.4g" | format(v) }} |
{% endfor %}{% else %}No evaluation was recorded.
{% endif %}
## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{{ folder }}")
model = AutoModelForCausalLM.from_pretrained("{{ folder }}")
{% if f.chat_template %}messages = [{"role": "user", "content": "..."}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
{% else %}inputs = tokenizer("...", return_tensors="pt")
{% endif %}answer = model.generate(**inputs, max_new_tokens=128, do_sample=False)
```

`generation_config.json` stops at the chat template's end-of-turn token{% if f.chat_template %} (the model was
trained, evaluated and served with this template){% endif %}.

## Export check

{{ check_line }}
"""


def front_matter(facts: CardFacts) -> str:
    """The card's YAML metadata block (without the ``---`` fences)."""
    meta: dict[str, Any] = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "license": facts.license or UNKNOWN_LICENSE,
        "tags": ["trainteam", "fine-tuned"],
    }
    if facts.base:
        meta["base_model"] = facts.base
    return yaml.safe_dump(meta, sort_keys=False)


def model_card(facts: CardFacts, *, folder: str, check_line: str) -> str:
    """The card's text for ``facts``; ``check_line`` is what reading the export back found."""
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)  # noqa: S701 (markdown)
    license_note = (
        "" if facts.license else "\n> The base model's license was not found: check it before you share this model.\n"
    )
    dev = lambda k: f"{facts.metrics[k]:.4g}" if k in facts.metrics else ""  # noqa: E731
    text = env.from_string(_CARD).render(
        f=facts, front_matter=front_matter(facts), folder=folder, check_line=check_line, dev=dev
    )
    return text + license_note
