"""Structured extraction: read records from prose, answer with JSON that validates against a given
JSON schema and matches every field."""

import json

from rlpt.rewards.guard import final_answer
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import register_verifier
from rlpt.tasks.native.common import domain

_FIRST = "Ada Ben Cleo Dan Eli Fay Gus Hana Ivo Jan Kim Lea Max Nia Oto Pia Rex Sia Tom Uma".split()
_LAST = "Ng Smith Okafor Berg Rossi Kato Silva Novak Haas Dubois Lund Meyer".split()
_CITIES = "Oslo Lima Perth Quito Riga Turin Accra Hanoi Malmo Porto".split()
_JOBS = "nurse pilot baker chemist teacher welder lawyer farmer".split()
_FIELDS = [  # (key, JSON type, sentence template, draw)
    (
        "name",
        "string",
        "{v} is one of the people in this report.",
        lambda r: f"{r.choice(_FIRST)} {r.choice(_LAST)}",
    ),
    ("age", "integer", "{n} is {v} years old.", lambda r: r.randint(18, 90)),
    ("city", "string", "{n} lives in {v}.", lambda r: r.choice(_CITIES)),
    ("job", "string", "By trade {n} is a {v}.", lambda r: r.choice(_JOBS)),
    ("salary", "integer", "{n} earns {v} euros a year.", lambda r: 1000 * r.randint(20, 150)),
    ("married", "boolean", "{n} is {v}.", lambda r: r.random() < 0.5),
    ("height_m", "number", "{n} is {v} m tall.", lambda r: r.randint(150, 200) / 100),
]
_NOISE = [
    "The weather that week was unremarkable.",
    "Several forms were filed late.",
    "The office closed early on Friday.",
    "Nobody mentioned the budget.",
]


def _sentence(key, template, name, value):
    if key == "married":
        value = "married" if value else "not married"
    return template.format(n=name.split()[0], v=value)


def _schema(keys, many):
    types = {k: t for k, t, _, _ in _FIELDS}
    record = {
        "type": "object",
        "properties": {k: {"type": types[k]} for k in keys},
        "required": list(keys),
        "additionalProperties": False,
    }
    return {"type": "array", "items": record} if many else record


def _extract(rng, t):
    n_fields, n_records = (2, 3, 4, 5, 7)[t - 1], (1, 1, 2, 3, 4)[t - 1]
    keys = ["name"] + rng.sample([f[0] for f in _FIELDS[1:]], n_fields - 1)
    names = [f"{first} {rng.choice(_LAST)}" for first in rng.sample(_FIRST, n_records)]
    records, sentences = [], []
    for name in names:
        record = {"name": name}
        for key, _, template, draw in _FIELDS:
            if key in keys and key != "name":
                record[key] = draw(rng)
                sentences.append(_sentence(key, template, name, record[key]))
        sentences.append(_FIELDS[0][2].format(v=name))
        records.append(record)
    if t >= 3:
        sentences += rng.sample(_NOISE, t - 2)
    rng.shuffle(sentences)
    many = n_records > 1
    schema = _schema(keys, many)
    gold = records if many else records[0]
    prompt = (
        " ".join(sentences)
        + "\nExtract "
        + ("every person, in order of name," if many else "the person")
        + f" as JSON matching this schema: {json.dumps(schema)}\nReply with the JSON only."
    )
    if many:
        gold = sorted(records, key=lambda r: r["name"])
    return prompt, {"answer": json.dumps(gold), "schema": schema}


@register_verifier("json_schema_fields")
def json_schema_fields(task, response: str) -> Verdict:
    """Valid JSON, valid against meta['schema'], and equal to meta['answer'] field by field."""
    import jsonschema

    got = final_answer(response)
    if got is not None and got.startswith("```"):
        got = got.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(got) if got else None
    except (json.JSONDecodeError, RecursionError):
        return Verdict(0.0, False, {"error": "not JSON", "process": 0.0})
    try:
        jsonschema.validate(value, task.meta["schema"])
    except jsonschema.ValidationError as err:
        return Verdict(0.0, False, {"error": f"schema: {err.message[:200]}", "process": 0.0})
    want = json.loads(task.meta["answer"])
    wants, gots = (want, value) if isinstance(want, list) else ([want], [value])
    fields = [_same(a[k], b[k]) for a, b in zip(wants, gots) for k in a]
    # Count the fields of every record wanted or given: a missing or extra record is wrong fields (zip alone
    # stopped at the shorter list, so `[]` matched every list task).
    n_fields = len(wants[0]) * max(len(wants), len(gots))
    ok = len(gots) == len(wants) and sum(fields) == n_fields
    # Valid structure earns process credit in proportion to matching fields.
    return Verdict(
        float(ok), ok, {"fields_correct": sum(fields), "fields": n_fields, "process": sum(fields) / n_fields}
    )


def _same(want, got) -> bool:
    """Equal values of the same JSON kind (1.0 == 1 for numbers, but true != 1)."""
    return (
        want == got
        and isinstance(want, bool) == isinstance(got, bool)
        and isinstance(want, str) == isinstance(got, str)
    )


def domains():
    return [domain("extract/json", _extract, "json_schema_fields", "records from prose as schema-valid JSON")]
