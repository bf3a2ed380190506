"""A persona's brief for one step: instructions rendered from its card's template.

The context is built from the task, the step, the budget (with what the run has spent)
and what the knowledge graph holds about the earlier steps — counts, metrics, gate
outcomes, never record contents, so data cannot speak to the model through its brief.
"""

from __future__ import annotations

from trainteam.agents.cards import PersonaCard, render, skills_for, task_conditions

_FACT_KEYS = ("split", "records", "stage", "vocab_size", "outcome", "metrics", "reasons", "name")


def model_line(task) -> str:
    m = task.model
    if m.path is not None:
        return f"local model {m.path} (fine-tuning)"
    return f"{m.arch} from random init, hidden {m.hidden_size} x {m.num_layers} layers, {m.num_heads} heads"


def data_line(task) -> str:
    d = task.data
    if d.demo:
        return f"bundled demo '{d.demo}' ({d.n_train} train / {d.n_eval} held-out, operands ≤ {d.max_operand})"
    held = d.eval_path or (
        f"its {d.eval_split} split"
        if d.eval_split
        else f"its validation/test split, else a seeded {d.eval_fraction:.0%} of its rows"
    )
    return f"your data {d.path} (held-out: {held})"


def graph_facts(ctx, limit: int = 24) -> list[str]:
    """Earlier steps' outcomes and the graph nodes they produced, in a few words each."""
    facts: list[str] = []
    g = ctx.graph
    for step, out in ctx.outputs.items():
        facts.append(f"step {step}: {out.outcome} — {out.summary[:200]}")
        for label, nid in sorted(out.nodes.items()):
            try:
                node = g.get_node(nid)
            except KeyError:
                continue
            attrs = ", ".join(f"{k}={node[k]}" for k in _FACT_KEYS if k in node)
            facts.append(f"  {label}: {node['kind']} {nid}" + (f" ({attrs})" if attrs else ""))
    return facts[:limit]


def spent_minutes(ctx) -> float | None:
    """Minutes the run's steps took so far, as the engine measured them (None outside a run)."""
    spent = getattr(ctx, "spent_s", None)
    return None if spent is None else spent / 60


def instructions(ctx, card: PersonaCard, tool: str) -> str:
    task = ctx.task
    conds = task_conditions(task, ctx.visit, ctx.decided.restart is not None, ctx.outputs)
    budget = task.budget.model_dump()
    budget["spent_minutes"] = spent_minutes(ctx)
    return render(
        card.template,
        card=card,
        tools=card.tools,
        run_id=ctx.run_id,
        task=task,
        step={
            "name": ctx.step,
            "visit": ctx.visit,
            "tool": tool,
            "inputs": {k: v for k, v in ctx.inputs.given().items() if isinstance(v, (str, int, float, bool))},
        },
        model_line=model_line(task),
        data_line=data_line(task),
        budget=budget,
        facts=graph_facts(ctx),
        skills=skills_for(card, conds),
    )


def step_prompt(ctx, tool: str) -> str:
    return (
        f"Run {ctx.run_id}, step {ctx.step} (visit {ctx.visit}): do this step with `{tool}`, "
        "then report your summary, decision and reasons."
    )


def loaded_skills(ctx, card: PersonaCard) -> list[str]:
    conds = task_conditions(ctx.task, ctx.visit, ctx.decided.restart is not None, ctx.outputs)
    return [s.name for s in skills_for(card, conds)]
