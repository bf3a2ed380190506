"""Node and edge vocabularies. New kinds are added here, never invented ad hoc."""

from __future__ import annotations

from enum import Enum


class NodeKind(str, Enum):
    CORPUS = "Corpus"
    DATASET_VERSION = "DatasetVersion"
    TOKENIZER = "Tokenizer"
    RUN = "Run"
    STEP = "Step"
    CHECKPOINT = "Checkpoint"
    EVAL = "Eval"
    GATE = "Gate"
    APPROVAL = "Approval"
    MODEL = "Model"
    TRANSCRIPT = "Transcript"
    DECISION = "Decision"
    TOOL_CALL = "ToolCall"
    PERSON = "Person"
    TELEMETRY = "Telemetry"
    PROBE = "Probe"  # a short run of the recipe search: one learning rate, its held-out loss at each rung
    PERSONA = "Persona"  # a persona a registered model is bound to (role ``persona:<name>``)
    EXPORT = "Export"  # a registered model written out (GGUF, Ollama, a Hugging Face folder) and read back


class EdgeKind(str, Enum):
    DERIVED_FROM = "derived_from"  # dataset -> parent dataset / corpus
    PRODUCED_BY = "produced_by"  # artifact -> step or run that made it
    PART_OF = "part_of"  # step -> run
    TRAINED_ON = "trained_on"  # checkpoint -> dataset version
    USES = "uses"  # checkpoint -> tokenizer, step -> input artifact
    EVALUATED_ON = "evaluated_on"  # eval -> dataset version
    EVALUATES = "evaluates"  # eval -> checkpoint
    DECIDED_BY = "decided_by"  # gate / decision -> eval or person
    APPROVED_BY = "approved_by"  # approval -> person
    REJECTED_BY = "rejected_by"  # approval -> person
    REQUESTED_BY = "requested_by"  # approval -> step
    REGISTERS = "registers"  # model -> checkpoint
    RECORDS = "records"  # transcript -> step
    CALLED_BY = "called_by"  # tool call -> step
    DECONTAMINATED_AGAINST = "decontaminated_against"  # dataset version -> eval set it was checked against
    BOUND_TO = "bound_to"  # model -> persona it serves (a role binding)
    EXPORTS = "exports"  # export -> the model it holds


def node_id(kind: NodeKind | str, key: str) -> str:
    """Stable ids: ``Kind:key``. The same fact always gets the same id."""
    kind_value = kind.value if isinstance(kind, NodeKind) else str(kind)
    return f"{kind_value}:{key}"
