"""Document QA over generated long documents: needle retrieval, two-hop lookup and aggregation across
sections. The tier sets the document length (about 1k to 256k characters) and the number of towns."""

import functools

import numpy as np

from rlpt.tasks.native.common import distinct, domain

_CHARS = {1: 1_000, 2: 4_000, 3: 16_000, 4: 64_000, 5: 256_000}
_TOWNS = {1: 3, 2: 5, 3: 10, 4: 20, 5: 40}
_SYL = "ka lo mi ne su ta ri po ve da zu fe ho bi ga ny or el an ul".split()
_PEOPLE = "Ames Birk Cole Dorn Eng Falk Grau Holt Iles Jahn Kerr Lutz Mohr Nash Orr Pike Quill Rook Sund Toll"
_PEOPLE = _PEOPLE.split()
_FILLER = [
    "The {a} {b} of {t} is known for its {c}.",
    "Visitors to {t} often remark on the {a} {c}.",
    "Records from {t} mention a {a} {b} near the river.",
    "In {t} the {c} season begins early most years.",
    "Local guides describe the {b} in {t} as {a}.",
]
_WORDS_A = "old quiet busy narrow green stone wooden famous small northern".split()
_WORDS_B = "market bridge square mill harbour chapel library garden tower well".split()
_WORDS_C = "festival bread weaving fishing music pottery wine cheese lace timber".split()


@functools.cache
def _filler_table() -> tuple[list[str], np.ndarray]:
    """Every filler sentence with its town left as '{t}' (5 x 10 x 10 x 10), and each one's length once the
    placeholder is removed: (sentences, (N,) int64 lengths)."""
    table = [f.format(t="{t}", a=a, b=b, c=c) for f in _FILLER for a in _WORDS_A for b in _WORDS_B for c in _WORDS_C]
    return table, np.array([len(x) - 3 for x in table], np.int64)


def _filler(rs: np.random.Generator, town_chars: int, chars: int) -> list[str]:
    """Uniform filler sentences (town left as '{t}') until their length, with a town name of `town_chars`
    and one space each, reaches `chars`.

    Sentences are drawn as a vector from the numpy stream `rs`: a 256k-character document takes ~5,000
    draws, which one `random.choice` at a time cost ~40 ms.
    """
    table, lengths = _filler_table()
    out: list[str] = []
    while chars > 0:
        picks = rs.integers(0, len(table), size=chars // 40 + 2)  # (m,); every sentence is < 80 chars
        ends = np.cumsum(lengths[picks] + town_chars + 1)  # (m,)
        m = int(np.searchsorted(ends, chars)) + 1  # sentences needed: the first whose end reaches chars
        out += [table[i] for i in picks[:m].tolist()]
        chars -= int(ends[min(m, len(ends)) - 1])
    return out


def _town_names(rng, n):
    names = distinct(n, lambda: "".join(rng.sample(_SYL, rng.randint(2, 3))).capitalize())
    return sorted(names, key=lambda _: rng.random())


def _document(rng, t):
    """(text, facts) with facts[town] = {'population', 'mayor', 'region', 'harbour'}."""
    towns = _town_names(rng, _TOWNS[t])
    mayors = rng.sample([f"{a}-{b}" for a in _PEOPLE for b in _PEOPLE if a != b], len(towns))
    facts = {
        town: {
            "population": rng.randint(100, 99_999),
            "mayor": mayor,
            "region": rng.choice("NESW"),
            "harbour": rng.random() < 0.4,
        }
        for town, mayor in zip(towns, mayors)
    }
    per_section = _CHARS[t] // len(towns)
    rs = np.random.Generator(np.random.PCG64(rng.getrandbits(64)))
    sections = []
    for i, town in enumerate(towns):
        f = facts[town]
        key = [
            f"{town} has a population of {f['population']}.",
            f"The mayor of {town} is {f['mayor']}.",
            f"{town} lies in the {dict(N='north', E='east', S='south', W='west')[f['region']]} region.",
            f"{town} has {'a' if f['harbour'] else 'no'} harbour.",
        ]
        body = _filler(rs, len(town), per_section - sum(map(len, key)))
        for sentence in key:
            body.insert(rng.randint(0, len(body)), sentence)
        sections.append(f"Section {i + 1}: {town}\n" + " ".join(body).replace("{t}", town))
    return "\n\n".join(sections), facts


def _ask(doc, question):
    return f"{doc}\n\nQuestion: {question}\nAnswer with the value only."


def _needle(rng, t):
    doc, facts = _document(rng, t)
    town = rng.choice(list(facts))
    return _ask(doc, f"What is the population of {town}?"), {"answer": str(facts[town]["population"])}


def _multihop(rng, t):
    doc, facts = _document(rng, t)
    town = rng.choice(list(facts))
    question = f"What is the population of the town whose mayor is {facts[town]['mayor']}?"
    return _ask(doc, question), {"answer": str(facts[town]["population"])}


def _aggregate(rng, t):
    doc, facts = _document(rng, t)
    if rng.random() < 0.5:
        region = rng.choice("NESW")
        name = dict(N="north", E="east", S="south", W="west")[region]
        total = sum(f["population"] for f in facts.values() if f["region"] == region)
        return _ask(doc, f"What is the total population of all towns in the {name} region (0 if none)?"), {
            "answer": str(total)
        }
    count = sum(f["harbour"] for f in facts.values())
    return _ask(doc, "How many towns have a harbour?"), {"answer": str(count)}


def domains():
    long = 20_000
    return [
        domain("docqa/needle", _needle, "numeric", "one fact from a long document", max_response_chars=long),
        domain(
            "docqa/multihop",
            _multihop,
            "numeric",
            "two linked facts (mayor -> town -> population)",
            max_response_chars=long,
        ),
        domain(
            "docqa/aggregate",
            _aggregate,
            "numeric",
            "sum or count across all sections",
            max_response_chars=long,
        ),
    ]
