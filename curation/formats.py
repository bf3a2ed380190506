"""How a (prompt, completion) pair becomes text, shared by training and evaluation.

Evaluation must see exactly the context training saw: a missing leading
separator took addition accuracy from 91 % to 16.5 % here.
"""

from __future__ import annotations


def prompt_text(tokenizer, prompt: str) -> str:
    """The context a model is given: a separator, then the prompt (``</s>12+34=``)."""
    sep = tokenizer.bos_token or tokenizer.eos_token or ""
    return sep + prompt


def completion_text(tokenizer, completion: str) -> str:
    """The target: the answer closed by EOS (``46</s>``), so generation knows where to stop."""
    return completion + (tokenizer.eos_token or "")
