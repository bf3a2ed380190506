"""Generated free-form chat tasks: answers with no single right string, only facts to keep and a house form.

Each task makes ``messages`` rows (one user message, one assistant answer) in the shape of
``chat_tasks.py``, deterministically from a seed; the held-out prompts never repeat a training prompt. The
wording of every reference is drawn at random from several paraphrase templates, so exact match says
little: a reply is judged by its overlap with the reference (ROUGE-L, chrF) and by its form, whether it
contains every *required string* of its row (the facts the prompt gives that every reference repeats, and
the house phrases every reference of the task shares; case-sensitive). Answers are about 25-60 tokens
under SmolLM2's tokenizer (about 15-40 words). Used by ``benchmarks/peer_sft.py``; imported by name.

- ``reply``: a support reply in the house style. The prompt gives a customer's first name, an order id,
  an issue (late delivery, damaged item, wrong size, missing part, refund request, double charge) and a
  date or an amount; the reply greets the customer by name, repeats the order id and the date or
  amount, says what happens next (four wordings of each part per issue) and ends with the house
  sign-off::

      Reply to this support ticket. Customer: Ines. Order: ORD-81840. Issue: late delivery; the parcel was
      due on 3 June 2026 and has not arrived.
      →
      Hi Ines,
      I am sorry order ORD-81840, due on 3 June 2026, is late. The courier is tracing it; I will update
      you tomorrow. Sorry for the trouble.
      Best regards, the Northwind Support Team

  Required: ``Hi Ines,``, ``ORD-81840``, ``3 June 2026``, ``Best regards, the Northwind Support Team``.
- ``summary``: a short summary that keeps the facts. The prompt asks to summarise a note of 3-5
  sentences (a meeting, an incident, a delivery, an inspection, a course, a fundraiser) holding a
  person's full name, a place, a number and a date among filler sentences; the reference is one or two
  sentences (four or more wordings per kind) that keep the name, the number and the date::

      Write a short summary of the note below, keeping the key facts.

      The projector failed twice. Liam Ferreira chaired the quarterly planning meeting in Reno on 6 July
      2026. 64 people attended. Several questions were left for next time.
      →
      On 6 July 2026, 64 people attended the planning meeting in Reno that Liam Ferreira chaired.

  Required: ``Liam Ferreira``, ``64``, ``6 July 2026``.
"""

from __future__ import annotations

import calendar
import random
from collections.abc import Callable

FREEFORM_TASKS = ("reply", "summary")
SIGN_OFF = "Best regards, the Northwind Support Team"

FIRST_NAMES = [
    "Maria",
    "James",
    "Aisha",
    "Tom",
    "Sofia",
    "Liam",
    "Yuki",
    "Omar",
    "Elena",
    "Noah",
    "Priya",
    "Lucas",
    "Hannah",
    "Mateo",
    "Chloe",
    "Ivan",
    "Grace",
    "Ravi",
    "Emma",
    "Diego",
    "Fatima",
    "Oliver",
    "Mei",
    "Samuel",
    "Zara",
    "Felix",
    "Nora",
    "Hugo",
    "Leila",
    "Daniel",
    "Amara",
    "Jonas",
    "Ines",
    "Kofi",
    "Clara",
    "Arjun",
    "Lena",
    "Marco",
    "Sara",
    "Tariq",
    "Anna",
    "Pablo",
    "Rosa",
    "Victor",
    "Julia",
    "Ethan",
    "Maya",
    "Karim",
]
LAST_NAMES = [
    "Whitfield",
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Brennan",
    "Castillo",
    "Novak",
    "Haddad",
    "Fischer",
    "Kowalski",
    "Marsh",
    "Petrov",
    "Quinn",
    "Adeyemi",
    "Silva",
    "Hartley",
    "Rossi",
    "Nakamura",
    "Dubois",
    "Osei",
    "Larsen",
    "Abbott",
    "Ferreira",
    "Kaur",
    "Sato",
    "Gallagher",
    "Weber",
    "Mendes",
    "Holloway",
]
PLACES = [
    "Porto",
    "Leeds",
    "Denver",
    "Lyon",
    "Osaka",
    "Bristol",
    "Austin",
    "Gdansk",
    "Cork",
    "Malmo",
    "Turin",
    "Halifax",
    "Perth",
    "Ghent",
    "Utrecht",
    "Bergen",
    "Tampere",
    "Seville",
    "Brno",
    "Graz",
    "Dundee",
    "Reno",
    "Kyoto",
    "Bilbao",
]

# --------------------------------------------------------------------------- reply

# issue: (its name in the prompt, what the customer says, whether the fact is a date or an amount)
ISSUES = {
    "late": ("late delivery", "the parcel was due on {fact} and has not arrived", "date"),
    "damaged": ("damaged item", "the item arrived damaged on {fact}", "date"),
    "size": ("wrong size", "the item delivered on {fact} is the wrong size", "date"),
    "missing": ("missing part", "a part is missing from the package delivered on {fact}", "date"),
    "refund": ("refund request", "the customer asks for a refund of {fact}", "amount"),
    "double": ("double charge", "the customer was charged {fact} twice", "amount"),
}
REPLY_ASKS = [
    "Write a support reply to {name}. Order {order}: {said}.",
    "Customer {name} wrote about order {order}: {said}. Draft our reply.",
    "Reply to this support ticket. Customer: {name}. Order: {order}. Issue: {issue}; {said}.",
    "Please answer {name}'s message about order {order} ({issue}): {said}.",
]
# Per issue: openers (which repeat the order id and the date or amount), then what will happen.
REPLY_OPENERS = {
    "late": [
        "I am sorry order {order}, due on {fact}, is late.",
        "Thanks for telling us order {order} missed its {fact} date.",
        "We apologise: order {order} did not arrive on {fact}.",
        "I checked order {order}, which was due on {fact}.",
    ],
    "damaged": [
        "I am sorry order {order} arrived damaged on {fact}.",
        "Thanks for reporting the damage to order {order} of {fact}.",
        "We apologise: order {order} reached you broken on {fact}.",
        "I looked into order {order}, damaged on arrival on {fact}.",
    ],
    "size": [
        "I am sorry order {order} of {fact} is the wrong size.",
        "Thanks for telling us order {order} of {fact} is the wrong fit.",
        "We apologise for the wrong size in order {order} on {fact}.",
        "I checked order {order} of {fact}: the size was wrong.",
    ],
    "missing": [
        "Sorry, a part was missing from order {order} on {fact}.",
        "Thanks for telling us order {order} lacked a part on {fact}.",
        "We apologise: order {order} was incomplete on {fact}.",
        "I checked order {order} of {fact}; a part was left out.",
    ],
    "refund": [
        "Thanks for your refund request of {fact} for order {order}.",
        "I have received your request to refund {fact} for order {order}.",
        "Your refund of {fact} for order {order} is approved.",
        "I checked order {order}: the refund of {fact} is approved.",
    ],
    "double": [
        "I am sorry you were charged {fact} twice for order {order}.",
        "Thanks for telling us order {order} was charged {fact} twice.",
        "We apologise: order {order} was billed {fact} twice.",
        "I checked order {order}; the second {fact} charge was our error.",
    ],
}
REPLY_ACTIONS = {
    "late": [
        "Our courier will deliver it within two working days.",
        "We have sent it again by express post, free of charge.",
        "The courier is tracing it; I will update you tomorrow.",
        "A new parcel leaves our warehouse today.",
    ],
    "damaged": [
        "A replacement will be shipped today at no cost.",
        "Please keep it; a new one ships this week.",
        "We will collect it and send a replacement.",
        "You will get a return label and a full refund.",
    ],
    "size": [
        "We will exchange it for the right size for free.",
        "Use the return label; the right size ships on its return.",
        "The right size is on its way; keep the other.",
        "Send it back with the enclosed label and we will swap it.",
    ],
    "missing": [
        "The missing part will be posted to you today.",
        "We are sending the part by express courier.",
        "The warehouse will ship the missing piece this week.",
        "A new complete set is on its way to you.",
    ],
    "refund": [
        "The money will be back on your card within five days.",
        "You should see it in your account in three to five days.",
        "It has been sent to your original payment method today.",
        "Our finance team will process it by Friday.",
    ],
    "double": [
        "The extra charge will be refunded within five days.",
        "We cancelled the duplicate payment today.",
        "Our billing team is refunding the second payment today.",
        "You will get the duplicate amount back within a week.",
    ],
}
REPLY_CLOSERS = ["", " Thanks for your patience.", " Sorry for the trouble.", " Thanks for waiting."]


def date_text(rng: random.Random) -> str:
    """A date of 2024-2026 as ``14 March 2025``."""
    year, month = rng.randint(2024, 2026), rng.randint(1, 12)
    return f"{rng.randint(1, calendar.monthrange(year, month)[1])} {calendar.month_name[month]} {year}"


def reply_row(rng: random.Random) -> tuple[str, str, list[str]]:
    key = rng.choice(sorted(ISSUES))
    issue, said, kind = ISSUES[key]
    name, order = rng.choice(FIRST_NAMES), f"ORD-{rng.randint(10000, 99999)}"
    fact = date_text(rng) if kind == "date" else f"${rng.randint(12, 480)}.{rng.choice(['00', '25', '50', '99'])}"
    said = said.format(fact=fact)
    ask = rng.choice(REPLY_ASKS).format(name=name, order=order, issue=issue, said=said)
    body = rng.choice(REPLY_OPENERS[key]).format(order=order, fact=fact) + " " + rng.choice(REPLY_ACTIONS[key])
    answer = f"Hi {name},\n{body}{rng.choice(REPLY_CLOSERS)}\n{SIGN_OFF}"
    return ask, answer, [f"Hi {name},", order, fact, SIGN_OFF]


# --------------------------------------------------------------------------- summary

# kind: (the two fact sentences, the filler sentences, the summaries); {number} is the digits, {unit} after it
NOTES: dict[str, tuple[list[str], list[str], list[str]]] = {
    "meeting": (
        ["{name} chaired the quarterly planning meeting in {place} on {date}.", "{number} people attended."],
        [
            "Coffee was served before the start.",
            "The projector failed twice.",
            "The agenda went out a week early.",
            "Several questions were left for next time.",
            "The room was booked for two hours.",
        ],
        [
            "{name} chaired the quarterly planning meeting in {place} on {date}, with {number} people attending.",
            "On {date}, {number} people attended the planning meeting in {place} that {name} chaired.",
            "The quarterly planning meeting on {date} in {place} was chaired by {name} and drew {number} people.",
            "{name} led the planning meeting held in {place} on {date}. It was attended by {number} people.",
            "A planning meeting of {number} people took place in {place} on {date}, chaired by {name}.",
        ],
    ),
    "incident": (
        [
            "On {date}, a water leak was found in the {place} warehouse.",
            "{name} shut off the main valve and moved {number} boxes to dry shelves.",
        ],
        [
            "The floor was mopped by the evening shift.",
            "Nobody was hurt.",
            "A plumber is due next week.",
            "The alarm system worked as expected.",
            "The insurer has been told.",
        ],
        [
            "A water leak hit the {place} warehouse on {date}; {name} shut off the valve and moved {number} boxes.",
            "On {date}, {name} handled a leak in the {place} warehouse, closing the valve and saving {number} boxes.",
            "{name} dealt with a warehouse leak in {place} on {date} by shutting the main valve and moving "
            "{number} boxes to dry shelves.",
            "After a leak was found in the {place} warehouse on {date}, {name} moved {number} boxes to dry shelves. "
            "The main valve was shut off.",
        ],
    ),
    "delivery": (
        ["{name} signed for a delivery at the {place} office on {date}.", "It held {number} office chairs."],
        [
            "The van arrived an hour late.",
            "Two boxes had torn corners.",
            "The old chairs will be donated.",
            "Assembly is planned for the weekend.",
            "The invoice was sent separately.",
        ],
        [
            "{name} signed for a delivery of {number} office chairs at the {place} office on {date}.",
            "On {date}, {number} office chairs were delivered to the {place} office, and {name} signed for them.",
            "A delivery of {number} office chairs reached the {place} office on {date}. {name} signed for it.",
            "{name} took in {number} new office chairs that were delivered to the {place} office on {date}.",
        ],
    ),
    "inspection": (
        [
            "{name} carried out the safety inspection of the {place} plant on {date}.",
            "{number} fire extinguishers were checked.",
        ],
        [
            "The weather was cold and wet.",
            "One exit sign needs a new bulb.",
            "The report will be filed on Friday.",
            "The site manager joined for the first hour.",
            "Parking was hard to find.",
        ],
        [
            "{name} inspected the {place} plant on {date} and checked {number} fire extinguishers.",
            "On {date}, {name} carried out a safety inspection in {place}, checking {number} fire extinguishers.",
            "The safety inspection of the {place} plant on {date} was done by {name}. {number} fire extinguishers "
            "were checked.",
            "{number} fire extinguishers were checked when {name} inspected the {place} plant on {date}.",
        ],
    ),
    "course": (
        ["On {date}, {name} ran a first-aid course in {place}.", "{number} staff members completed it."],
        [
            "Lunch was provided.",
            "The course lasted most of the day.",
            "Feedback forms were handed out at the end.",
            "A second session is being considered.",
            "The trainer brought new equipment.",
        ],
        [
            "{name} ran a first-aid course in {place} on {date}, and {number} staff members completed it.",
            "On {date}, {number} staff members finished the first-aid course that {name} ran in {place}.",
            "A first-aid course led by {name} took place in {place} on {date}. {number} staff members completed it.",
            "{number} staff members completed {name}'s first-aid course, held in {place} on {date}.",
        ],
    ),
    "fundraiser": (
        ["{name} organised a charity run in {place} on {date}.", "It raised {number} pounds for the local hospital."],
        [
            "The route went along the river.",
            "It rained for the first hour.",
            "Local shops donated the prizes.",
            "Volunteers handed out water at every mile.",
            "A photo gallery will be online soon.",
        ],
        [
            "{name} organised a charity run in {place} on {date} that raised {number} pounds for the hospital.",
            "On {date}, a charity run in {place} organised by {name} raised {number} pounds for the local hospital.",
            "The charity run {name} organised in {place} on {date} raised {number} pounds. The money goes to the "
            "local hospital.",
            "{number} pounds were raised for the local hospital by the charity run {name} organised in {place} "
            "on {date}.",
        ],
    ),
}
NUMBERS = {
    "meeting": (12, 180),
    "incident": (12, 600),
    "delivery": (12, 240),
    "inspection": (12, 400),
    "course": (12, 120),
    "fundraiser": (150, 9500),
}
SUMMARY_ASKS = [
    "Summarise this note in one or two sentences: {note}",
    "Write a short summary of the note below, keeping the key facts.\n\n{note}",
    "Summarize the following note briefly:\n{note}",
    "Give a one- or two-sentence summary of this note. {note}",
]


def summary_row(rng: random.Random) -> tuple[str, str, list[str]]:
    kind = rng.choice(sorted(NOTES))
    facts, fillers, summaries = NOTES[kind]
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    place, date = rng.choice(PLACES), date_text(rng)
    number = rng.randint(*NUMBERS[kind])
    while str(number) in date:  # else a reply could hold the number only inside the date
        number = rng.randint(*NUMBERS[kind])
    values = {"name": name, "place": place, "date": date, "number": number}
    sentences = [s.format(**values) for s in facts]
    for filler in rng.sample(fillers, rng.randint(1, 3)):  # 3-5 sentences, the facts kept in their order
        sentences.insert(rng.randint(0, len(sentences)), filler)
    ask = rng.choice(SUMMARY_ASKS).format(note=" ".join(sentences))
    return ask, rng.choice(summaries).format(**values), [name, str(number), date]


# --------------------------------------------------------------------------- rows

FREEFORM: dict[str, Callable[[random.Random], tuple[str, str, list[str]]]] = {
    "reply": reply_row,
    "summary": summary_row,
}


def freeform_rows(
    task: str, n_train: int = 200, n_eval: int = 60, seed: int = 0
) -> tuple[list[dict], list[dict], list[list[str]]]:
    """``n_train`` training and ``n_eval`` held-out ``messages`` rows of ``task`` (every prompt and answer
    distinct), and for each held-out row the strings its answer must contain (case-sensitive)."""
    make, rng = FREEFORM[task], random.Random(f"{task}:{seed}")
    seen: set[str] = set()
    rows: list[dict] = []
    required: list[list[str]] = []
    for _ in range(100 * (n_train + n_eval)):
        if len(rows) == n_train + n_eval:
            break
        question, answer, must = make(rng)
        if question not in seen and answer not in seen:
            seen.update((question, answer))
            rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]})
            required.append(must)
    if len(rows) < n_train + n_eval:
        raise ValueError(f"{task}: only {len(rows)} distinct prompts")
    return rows[:n_train], rows[n_train:], required[n_train:]
