"""Short instruction rows as a user holds them: one-line questions with one-word or one-line answers.

Deterministic, each prompt distinct: capitals, opposites, plurals, French words, spelling backwards
and small sums, so a held-out part never repeats a training question. Imported by name
(tests/conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

CAPITALS = [
    ("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Portugal", "Lisbon"),
    ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"), ("Ireland", "Dublin"), ("Greece", "Athens"), ("Hungary", "Budapest"),
    ("Japan", "Tokyo"), ("China", "Beijing"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Chile", "Santiago"), ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Cuba", "Havana"), ("India", "New Delhi"),
    ("Russia", "Moscow"), ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"),
]
OPPOSITES = [
    ("hot", "cold"), ("big", "small"), ("fast", "slow"), ("happy", "sad"), ("light", "dark"), ("early", "late"),
    ("open", "closed"), ("full", "empty"), ("rich", "poor"), ("young", "old"), ("hard", "soft"), ("wet", "dry"),
    ("loud", "quiet"), ("thick", "thin"), ("strong", "weak"), ("high", "low"), ("long", "short"), ("clean", "dirty"),
    ("near", "far"), ("cheap", "expensive"), ("brave", "afraid"), ("sharp", "blunt"), ("heavy", "light"),
    ("win", "lose"), ("buy", "sell"), ("push", "pull"), ("arrive", "leave"), ("remember", "forget"),
    ("accept", "refuse"), ("begin", "end"),
]
PLURALS = [
    ("mouse", "mice"), ("child", "children"), ("tooth", "teeth"), ("foot", "feet"), ("person", "people"),
    ("man", "men"), ("woman", "women"), ("goose", "geese"), ("ox", "oxen"), ("leaf", "leaves"), ("knife", "knives"),
    ("wolf", "wolves"), ("city", "cities"), ("baby", "babies"), ("box", "boxes"), ("bus", "buses"),
    ("church", "churches"), ("potato", "potatoes"), ("hero", "heroes"), ("cactus", "cacti"), ("crisis", "crises"),
    ("sheep", "sheep"), ("fish", "fish"), ("deer", "deer"), ("life", "lives"), ("wife", "wives"), ("half", "halves"),
    ("shelf", "shelves"), ("thief", "thieves"), ("loaf", "loaves"),
]
FRENCH = [
    ("cat", "chat"), ("dog", "chien"), ("house", "maison"), ("water", "eau"), ("bread", "pain"), ("apple", "pomme"),
    ("book", "livre"), ("car", "voiture"), ("tree", "arbre"), ("sun", "soleil"), ("moon", "lune"), ("sea", "mer"),
    ("friend", "ami"), ("school", "école"), ("cheese", "fromage"), ("door", "porte"), ("window", "fenêtre"),
    ("table", "table"), ("chair", "chaise"), ("milk", "lait"), ("flower", "fleur"), ("bird", "oiseau"),
    ("horse", "cheval"), ("red", "rouge"), ("green", "vert"), ("blue", "bleu"), ("night", "nuit"), ("day", "jour"),
    ("city", "ville"), ("river", "rivière"),
]
WORDS = ["planet", "garden", "silver", "rocket", "pencil", "window", "candle", "forest", "bridge", "market",
         "orange", "winter", "summer", "castle", "island", "guitar", "dragon", "cookie", "basket", "button",
         "jacket", "ladder", "mirror", "needle", "pepper", "puzzle", "ribbon", "saddle", "tunnel", "velvet"]


def _all_rows() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for i in range(30):
        country, capital = CAPITALS[i]
        word, opposite = OPPOSITES[i]
        one, many = PLURALS[i]
        english, french = FRENCH[i]
        spelled = WORDS[i]
        out += [
            (f"What is the capital of {country}?", capital),
            (f"Give the opposite of the word '{word}'.", opposite),
            (f"What is the plural of '{one}'?", many),
            (f"Translate '{english}' into French.", french),
            (f"Spell the word '{spelled}' backwards.", spelled[::-1]),
            (f"How much is {7 + 3 * i} plus {2 + 5 * i}?", f"{9 + 8 * i}."),
        ]
    return out  # 180 distinct questions


def instruction_rows(n: int = 150, start: int = 0) -> list[dict]:
    """``n`` prompt/completion rows from the ``start``-th question on (180 in all)."""
    rows = _all_rows()
    if start + n > len(rows):
        raise ValueError(f"only {len(rows)} distinct questions")
    return [{"id": f"q{start + k:03d}", "prompt": p, "completion": c} for k, (p, c) in enumerate(rows[start:start + n])]


def as_chat(rows: list[dict], system: str | None = None) -> list[dict]:
    """The same rows as conversations (``messages``), with a system turn when given."""
    sys_turn = [{"role": "system", "content": system}] if system else []
    return [{"id": r["id"], "messages": sys_turn + [{"role": "user", "content": r["prompt"]},
                                                    {"role": "assistant", "content": r["completion"]}]}
            for r in rows]
