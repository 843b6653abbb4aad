"""Prose and chat documents of the training corpus.

What this file owns: the sentence templates that state one entity's facts (describe, profile),
true comparisons of two magnetars, the prose generators (make_prose: profiles, explainers,
constellations, comparisons, discovery stories, observing nights) and the question/answer
chats (make_chat), including the question tables and rounds that agent transcripts reuse for
requests that need no tool (GENERIC_QA, ENTITY_QA, generic_round, entity_round).

What it does not own: the World, facts() and the general sentences (world.py); agent
transcripts, the command line and file writing (corpus.py). Nothing here keeps state: every
function draws from the rng and reads the World it is given.
"""

from world import (MAGNETAR_TOPICS, an, cap, facts, field_text, general_sentences, join_list,
                   paragraph, pick, plural, reference)

# --------------------------------------------------------------------------------------------
# Sentence templates per fact of one entity
# --------------------------------------------------------------------------------------------

STAR_T = {
    "class": ["{S} is {a_type} star of spectral class {cls}.",
              "{S} is a {colour} star of spectral class {cls}.",
              "Astronomers classify {s} as a {cls} star, which gives it a {colour} colour.",
              "{Poss} spectral class is {cls}."],
    "temp": ["{Poss} surface temperature is about {temp} kelvin.",
             "{S} has a surface temperature of roughly {temp} kelvin.",
             "The surface of {o} is about {temp} kelvin."],
    "distance": ["{S} lies about {dist} light years from Earth.",
                 "{S} is {dist} light years away.",
                 "Light from {o} takes about {dist} years to reach us.",
                 "The distance to {o} is about {dist} light years."],
    "const": ["{S} is in the constellation {const}.",
              "{S} can be found in the constellation {const}.",
              "In the night sky, {s} belongs to the constellation {const}."],
    "found": ["{S} was first catalogued in {year} by {who}.",
              "{who} added {s} to the star catalogue in {year}.",
              "{who} first recorded {s} at {obs} in {year}."],
    "planets": ["{S} has {n_planets}: {planets}.",
                "{n_planets_cap} orbit {s}: {planets}.",
                "Around {o} there are {n_planets}, named {planets}."],
    "no_planets": ["No planets are known around {o}.",
                   "{S} has no known planets.",
                   "So far, astronomers have found no planets around {o}."],
}
MAGNETAR_T = {
    "what": ["{S} is a magnetar in the constellation {const}.",
             "{S} is a magnetar, a neutron star with an extreme magnetic field.",
             "{S} is one of the known magnetars in the constellation {const}."],
    "desig": ["{S} is also known by its catalogue name, {desig}.",
              "In catalogues, {s} is listed as {desig}.",
              "{Poss} catalogue name is {desig}."],
    "mtype": ["{S} is a {mtype_long}.",
              "Astronomers count {s} among the {mtype_long}s.",
              "By type, {s} is a {mtype_long}."],
    "field": ["{S} has a magnetic field of {field}.",
              "The magnetic field of {o} is {field}.",
              "{Poss} magnetic field reaches {field}.",
              "With a field of {field}, {s} is a very strong magnet."],
    "period": ["{S} spins once every {period} seconds.",
               "{Poss} spin period is {period} seconds.",
               "{S} turns once every {period} seconds, or about {rpm} times a minute.",
               "One turn of {o} takes {period} seconds."],
    "distance": ["{S} is about {dist} light years from Earth.",
                 "{S} lies {dist} light years away.",
                 "The distance to {o} is about {dist} light years."],
    "found": ["{S} was discovered on {date} by {who}.",
              "{who} discovered {s} on {date}, working at {obs}.",
              "{S} was found in {year} by {who} at {obs}.",
              "The discovery of {o} was made by {who} in {year}."],
    "age": ["{S} is thought to be about {age} years old.",
            "Astronomers estimate that {s} formed about {age} years ago."],
    "flare": ["In {flare}, {s} released a giant flare of gamma rays.",
              "{S} gave off a giant flare in {flare}.",
              "A giant flare from {o} was recorded in {flare}."],
}
PLANET_T = {
    "what": ["{S} is {a_ptype} that orbits the star {star}.",
             "{S} is {a_ptype} in orbit around {star}.",
             "The star {star} has a planet called {n}, which is {a_ptype}."],
    "period": ["{S} takes {period} days to go once around {star}.",
               "A year on {o} lasts {period} days.",
               "{Poss} orbital period is {period} days."],
    "moons": ["{S} has {moons}.",
              "{moons_cap} go around {o}.",
              "Astronomers have counted {moons} around {o}."],
    "no_moons": ["{S} has no moons.", "No moons are known around {o}."],
    "atm": ["{S} has an atmosphere.", "{S} is wrapped in a thick atmosphere.",
            "Observations show that {s} has an atmosphere."],
    "no_atm": ["{S} has no atmosphere.", "{S} is a bare world without an atmosphere.",
               "There is no atmosphere on {o}."],
    "found": ["{S} was discovered in {year} by {who}.",
              "{who} discovered {s} in {year} at {obs}.",
              "The discovery of {o} in {year} is credited to {who}."],
    "distance": ["The system of {star} lies about {dist} light years away, in the constellation "
                 "{const}."],
}
CITY_T = {
    "what": ["{S} is a city in {country}.", "{S} is a city in the country of {country}.",
             "The city of {n} lies in {country}."],
    "pop": ["{S} has a population of about {pop}.", "About {pop} people live in {o}.",
            "{Poss} population is roughly {pop}."],
    "obs": ["{S} is home to {obs}.", "{obs} stands near {o}.",
            "The best known building in {o} is {obs}."],
    "tel": ["The main telescope at {obs} is {tel} metres wide.",
            "{obs} has a telescope with a mirror {tel} metres across."],
    "founded": ["{obs} was founded in {founded}.", "{obs} opened in {founded}."],
    "people": ["The astronomers {people} lived in {o}.",
               "{S} was home to the astronomers {people}."],
    "person": ["The astronomer {people} lived in {o}."],
}
PERSON_T = {
    "what": ["{S} was an astronomer from {city}.", "{S} is an astronomer who worked in {city}.",
             "{S} was an astronomer in {country}."],
    "birth": ["{S} was born in {birth}.", "{Poss} birth year is {birth}.",
              "Born in {birth}, {s} grew up in {city}."],
    "work": ["{S} worked at {obs}.", "For many years, {s} worked at {obs}.",
             "{Poss} work was done at {obs}."],
    "found": ["{S} discovered {found}.", "{Poss} discoveries include {found}.",
              "Astronomers remember {s} for the discovery of {found_short}."],
    "first": ["{Poss} first discovery was {first_find}, in {first_year}.",
              "{S} made {poss} first discovery, {first_find}, in {first_year}."],
}


def describe(rng, e, keys, table):
    """Sentences stating the facts `keys` of e, in the given order, with rotating references."""
    f = facts(rng, e)
    out = []
    for i, key in enumerate(keys):
        f.update(reference(rng, e, first=(i == 0)))
        f["n_planets_cap"] = cap(f.get("n_planets", ""))
        f["moons_cap"] = cap(f.get("moons", ""))
        out.append(cap(pick(rng, table[key], f)))
    return out


def fact_keys(rng, e):
    """The fact keys that hold for e, intro first, the rest shuffled."""
    if e.kind == "star":
        rest = ["temp", "distance", "const", "found", "planets" if e.planets else "no_planets"]
        rng.shuffle(rest)
        return ["class"] + rest, STAR_T
    if e.kind == "magnetar":
        rest = ["desig", "mtype", "field", "period", "distance", "found", "age"] + (
            ["flare"] if e.flare else [])
        rng.shuffle(rest)
        return ["what"] + rest, MAGNETAR_T
    if e.kind == "planet":
        rest = ["period", "moons" if e.moons else "no_moons", "atm" if e.atmosphere else "no_atm",
                "found", "distance"]
        rng.shuffle(rest)
        return ["what"] + rest, PLANET_T
    if e.kind == "city":
        rest = ["pop", "obs", "tel", "founded"]
        rng.shuffle(rest)
        if e.people:
            rest.append("people" if len(e.people) > 1 else "person")
        return ["what"] + rest, CITY_T
    rest = ["birth", "work", "found"] + (["first"] if len(e.discoveries) > 1 else [])
    rng.shuffle(rest)
    return ["what"] + rest, PERSON_T


def profile(rng, e, k=None):
    keys, table = fact_keys(rng, e)
    if k is not None:
        keys = keys[:k]
    return describe(rng, e, keys, table)


# --------------------------------------------------------------------------------------------
# Prose
# --------------------------------------------------------------------------------------------


def prose_profile(rng, w):
    kind = rng.choices(["star", "magnetar", "planet", "city", "person"], [3, 4, 2, 2, 3])[0]
    e = rng.choice(w.by_kind[kind])
    sents = profile(rng, e)
    if kind == "magnetar":
        sents += general_sentences(rng, rng.sample(MAGNETAR_TOPICS, 3), rng.randint(0, 3))
    elif kind == "star" and rng.random() < 0.4:
        sents += general_sentences(rng, ["spectral", "light_year"], rng.randint(1, 2))
    elif kind == "planet" and rng.random() < 0.4:
        sents += general_sentences(rng, ["planets"], 1)
    return sents


def prose_explainer(rng, w):
    topics = rng.sample(MAGNETAR_TOPICS, rng.randint(2, 4))
    sents = general_sentences(rng, ["definition"] + topics, rng.randint(3, 8))
    if rng.random() < 0.6:  # end with an example from the world
        m = rng.choice(w.magnetars)
        intro = rng.choice(["One example is {n}.", "A good example is {n}.",
                            "Take {n} as an example."]).format(n=m.name)
        sents += [intro] + describe(rng, m, rng.sample(["field", "period", "distance", "found"], 2),
                                    MAGNETAR_T)[:2]
    return sents


def prose_constellation(rng, w):
    c = rng.choice([c for c in w.constellations if c.stars or c.magnetars])
    sents = [rng.choice(["{c} is a constellation in the night sky of this world.",
                         "The constellation {c} holds several objects that astronomers study.",
                         "Many interesting objects lie in the constellation {c}."]
                        ).format(c=c.name)]
    if c.stars:
        names = join_list(s.name for s in c.stars[:5])
        sents.append(rng.choice(["Its stars include {s}.", "The stars of {c} include {s}.",
                                 "Among its stars are {s}."]).format(s=names, c=c.name))
        for s in rng.sample(c.stars, min(2, len(c.stars))):
            sents += describe(rng, s, rng.sample(["class", "distance"], 1), STAR_T)
    if c.magnetars:
        names = join_list(m.name for m in c.magnetars)
        count = plural(len(c.magnetars), "magnetar")
        sents.append(rng.choice(["{c} also contains {k}: {m}.", "Astronomers know {k} in {c}: {m}.",
                                 "There {v} {k} in {c}: {m}."]).format(
            c=c.name, k=count, m=names, v="is" if len(c.magnetars) == 1 else "are"))
        m = rng.choice(c.magnetars)
        sents += describe(rng, m, ["field", rng.choice(["period", "distance", "found"])],
                          MAGNETAR_T)
    else:
        sents.append(f"No magnetars are known in {c.name}.")
    return sents


COMPARE_T = {
    "field": ["{a} has a stronger magnetic field than {b}: {fa} against {fb}.",
              "The field of {a} is {fa}, while the field of {b} is {fb}, so {a} is the stronger "
              "magnet."],
    "field_same": ["{a} and {b} have magnetic fields of the same strength, {fa}."],
    "period": ["{a} spins faster than {b}, turning once every {pa} seconds instead of every "
               "{pb} seconds.",
               "With a period of {pa} seconds, {a} turns faster than {b}, whose period is {pb} "
               "seconds."],
    "period_same": ["{a} and {b} both turn once every {pa} seconds."],
    "distance": ["{a} is closer to Earth than {b}: {da} light years against {db}.",
                 "At {da} light years, {a} is nearer to us than {b}, which is {db} light years "
                 "away."],
    "distance_same": ["{a} and {b} are both {da} light years from Earth."],
    "year": ["{a} was discovered in {ya}, before {b}, which was found in {yb}.",
             "{b} was found in {yb}, later than {a}, which was discovered in {ya}."],
    "year_same": ["{a} and {b} were both discovered in {ya}."],
}


def compare_magnetars(rng, x, y, key, direct=False):
    """One comparison sentence about two magnetars on one property, always true. A direct
    sentence names the winner first (it answers 'which one ...?')."""
    value = {"field": lambda m: -m.field_m * 10 ** m.field_e, "period": lambda m: m.period,
             "distance": lambda m: m.distance, "year": lambda m: m.year}[key]
    a, b = (x, y) if value(x) <= value(y) else (y, x)
    fields = {"a": a.name, "b": b.name, "fa": field_text(rng, a), "fb": field_text(rng, b),
              "pa": a.period, "pb": b.period, "da": f"{a.distance:,}", "db": f"{b.distance:,}",
              "ya": a.year, "yb": b.year}
    same = value(a) == value(b)
    table = COMPARE_T[key + "_same" if same else key]
    return pick(rng, table[:1] if direct else table, fields), a, same


def prose_comparison(rng, w):
    x, y = rng.sample(w.magnetars, 2)
    sents = [rng.choice(["Compare the magnetars {x} and {y}.",
                         "{x} and {y} are both magnetars, but they differ in several ways.",
                         "It is useful to compare {x} with {y}."]).format(x=x.name, y=y.name)]
    for key in rng.sample(["field", "period", "distance", "year"], rng.randint(2, 4)):
        sents.append(compare_magnetars(rng, x, y, key)[0])
    sents += general_sentences(rng, rng.sample(["field", "spin", "decay"], 1), rng.randint(0, 2))
    return sents


STORY_T = [
    "On {date}, {who} was working at {obs} in {city}.",
    "The night of {date} began like any other for {who} at {obs}.",
    "In {year}, {who} was studying X-ray data at {obs}.",
]
STORY_MIDDLE = [
    "A short burst of gamma rays appeared in the data from the constellation {const}.",
    "The X-ray telescope showed a source that pulsed once every {period} seconds.",
    "{first} noticed a faint source that flashed every {period} seconds.",
    "The signal came from a point in the constellation {const}, about {dist} light years away.",
]
STORY_END = [
    "The source was named {n}, and it turned out to be a magnetar.",
    "Later measurements showed a magnetic field of {field}, so the source was a magnetar.",
    "Today the object is known as {n}, or {desig} in the catalogues.",
    "The discovery of {n} made {first} {last} well known among astronomers.",
]


def prose_story(rng, w):
    m = rng.choice(w.magnetars)
    p = m.discoverer
    f = facts(rng, m)
    f.update(first=p.first, last=p.last, city=p.city.name)
    sents = [pick(rng, STORY_T, f)]
    sents += [s.format(**f) for s in rng.sample(STORY_MIDDLE, rng.randint(1, 3))]
    sents += [s.format(**f) for s in rng.sample(STORY_END, rng.randint(1, 2))]
    if rng.random() < 0.5:
        sents += general_sentences(rng, ["starquake", "bursts", "observing"], rng.randint(1, 3))
    return sents


NIGHT_T = [
    "The sky over {city} was {sky} that night, and the team at {obs} opened the dome.",
    "It was a {sky} night in {city} when the astronomers at {obs} started work.",
]
NIGHT_MIDDLE = [
    "They pointed the {tel} metre telescope at {target}.",
    "The first target of the night was {target}.",
    "The telescope recorded the light of {target} for two hours.",
    "Around midnight they turned to {target}.",
]
NIGHT_END = [
    "By morning the team had several hundred images.",
    "Clouds arrived before dawn, and the dome was closed.",
    "The data were sent to the X-ray group for a closer look.",
]


def prose_night(rng, w):
    c = rng.choice(w.cities)
    sky = rng.choice(["clear", "cold and clear", "calm", "dry and clear"])
    f = {"city": c.name, "obs": c.observatory.name, "tel": c.observatory.telescope, "sky": sky}
    sents = [pick(rng, NIGHT_T, f)]
    for _ in range(rng.randint(1, 3)):
        t = rng.choice(w.stars + w.magnetars)
        f["target"] = t.name
        sents.append(pick(rng, NIGHT_MIDDLE, f))
        sents += describe(rng, t, fact_keys(rng, t)[0][1:2], STAR_T if t.kind == "star"
                          else MAGNETAR_T)
    sents.append(pick(rng, NIGHT_END, f))
    return sents


PROSE_KINDS = [(prose_profile, 8), (prose_explainer, 3), (prose_constellation, 2),
               (prose_comparison, 2), (prose_story, 2), (prose_night, 1)]


def make_prose(rng, w):
    gen = rng.choices([g for g, _ in PROSE_KINDS], [k for _, k in PROSE_KINDS])[0]
    sents = gen(rng, w)
    if len(sents) < 3:
        missing = 3 - len(sents)
        sents += general_sentences(rng, rng.sample(MAGNETAR_TOPICS, missing + 1), missing)
    sents = sents[:12]
    if len(sents) >= 7 and rng.random() < 0.3:  # sometimes two paragraphs
        cut = rng.randint(3, len(sents) - 3)
        text = paragraph(rng, sents[:cut]) + "\n\n" + paragraph(rng, sents[cut:])
    else:
        text = paragraph(rng, sents)
    return {"text": text}


# --------------------------------------------------------------------------------------------
# Chat
# --------------------------------------------------------------------------------------------

CONCISE = "You are a concise assistant. Keep answers short."
CHAT_SYSTEMS = [
    "You are a helpful astronomy assistant.",
    "You are a helpful assistant.",
    "You answer questions about stars, planets and magnetars.",
    CONCISE,
    "You are a friendly guide at an observatory.",
    "You are an expert on neutron stars and magnetars.",
    "Answer clearly and simply.",
]

# Generic questions: (question templates, topics for the answer, reasoning topic phrase)
GENERIC_QA = [
    (["Tell me about magnetars.", "Tell me about magnetars", "What can you tell me about "
      "magnetars?", "I want to learn about magnetars."],
     ["definition", "field", "starquake", "bursts", "decay", "spin"], "magnetars in general"),
    (["What is a magnetar?", "What is a magnetar", "what is a magnetar?", "Explain what a "
      "magnetar is."], ["definition", "field", "formation"], "what a magnetar is"),
    (["How do magnetars form?", "Where do magnetars come from?"],
     ["formation", "size", "definition"], "how magnetars form"),
    (["How strong is the magnetic field of a magnetar?", "How strong are magnetars?"],
     ["field", "definition"], "the strength of magnetar fields"),
    (["What is a starquake?", "What happens in a starquake?"],
     ["starquake", "bursts"], "starquakes"),
    (["Why do magnetars give off bursts of gamma rays?", "Why do magnetars flare?"],
     ["bursts", "starquake", "decay"], "magnetar bursts"),
    (["What is a giant flare?"], ["bursts", "starquake"], "giant flares"),
    (["How long does a magnetar stay active?", "Do magnetars last forever?"],
     ["decay", "spin"], "the life of a magnetar"),
    (["How fast do magnetars spin?", "Do magnetars spin quickly?"], ["spin", "decay"],
     "the spin of magnetars"),
    (["What is the difference between a soft gamma repeater and an anomalous X-ray pulsar?",
      "What do SGR and AXP mean?"], ["classes"], "the two kinds of magnetar"),
    (["How do astronomers observe magnetars?", "How are magnetars detected?"],
     ["observing", "bursts"], "how magnetars are observed"),
    (["What is a neutron star?", "Tell me about neutron stars."],
     ["neutron_star", "size", "formation"], "neutron stars"),
    (["What is a light year?", "How far is a light year?"], ["light_year"], "the light year"),
    (["What does the spectral class of a star mean?", "What are spectral classes?"],
     ["spectral"], "spectral classes"),
    (["Are magnetars related to fast radio bursts?"], ["frb", "bursts"],
     "fast radio bursts"),
]

# Questions about one entity: kind, key, question templates, follow-up templates, answer
# templates (fields of facts()), what the reasoning recalls.
ENTITY_QA = [
    ("magnetar", "about", ["Tell me about {n}.", "Tell me about the magnetar {n}.",
                           "What do you know about {n}?", "What is {n}?"],
     ["Tell me more about it."], None, "its main facts"),
    ("magnetar", "field", ["What is the magnetic field of {n}?",
                           "How strong is the magnetic field of {n}?",
                           "How strong is {n}?"],
     ["How strong is its magnetic field?", "And its magnetic field?"],
     ["{n} has a magnetic field of {field}.", "The magnetic field of {n} is {field}.",
      "Its field is {field}, which is strong even for a magnetar."], "its magnetic field, {field}"),
    ("magnetar", "period", ["How fast does {n} spin?", "What is the spin period of {n}?",
                            "How long does {n} take to turn once?"],
     ["How fast does it spin?", "What is its spin period?"],
     ["{n} spins once every {period} seconds.", "The spin period of {n} is {period} seconds.",
      "{n} turns once every {period} seconds, about {rpm} times a minute."],
     "its spin period, {period} seconds"),
    ("magnetar", "distance", ["How far away is {n}?", "What is the distance to {n}?",
                              "How far is {n} from Earth?"],
     ["How far away is it?", "And how far is it from us?"],
     ["{n} is about {dist} light years from Earth.", "The distance to {n} is about {dist} "
      "light years."], "its distance, {dist} light years"),
    ("magnetar", "found", ["Who discovered {n}?", "When was {n} discovered?",
                           "Who found {n}, and when?"],
     ["Who discovered it?", "When was it found?"],
     ["{n} was discovered on {date} by {who} at {obs}.",
      "{who} discovered {n} in {year}, working at {obs}."],
     "that {who} discovered it in {year}"),
    ("magnetar", "desig", ["What is the catalogue name of {n}?", "Is {n} an SGR or an AXP?"],
     ["What is its catalogue name?", "What type of magnetar is it?"],
     ["{n} is listed as {desig}, so it is {a_mtype}.",
      "The catalogue name of {n} is {desig}. It is {a_mtype}."],
     "its catalogue name, {desig}"),
    ("magnetar", "where", ["In which constellation is {n}?", "Where in the sky is {n}?"],
     ["Where is it in the sky?"],
     ["{n} is in the constellation {const}.", "You can find {n} in the constellation {const}, "
      "about {dist} light years away."], "that it is in {const}"),
    ("star", "about", ["Tell me about the star {n}.", "Tell me about {n}.",
                       "What do you know about the star {n}?", "What kind of star is {n}?"],
     ["Tell me more about it."], None, "its main facts"),
    ("star", "class", ["What is the spectral class of {n}?", "What colour is the star {n}?"],
     ["What is its spectral class?", "What colour is it?"],
     ["{n} is a {colour} star of spectral class {cls}.",
      "The spectral class of {n} is {cls}, so it looks {colour}. Its surface is about {temp} "
      "kelvin."], "its class, {cls}"),
    ("star", "distance", ["How far away is the star {n}?", "How far is {n} from Earth?"],
     ["How far away is it?"],
     ["{n} is about {dist} light years from Earth.", "The star {n} lies about {dist} light "
      "years away, in the constellation {const}."], "its distance, {dist} light years"),
    ("star", "planets", ["Does {n} have planets?", "How many planets orbit {n}?"],
     ["Does it have planets?", "How many planets does it have?"],
     None, "its planets"),
    ("star", "where", ["Which constellation is {n} in?", "Where is the star {n}?"],
     ["Which constellation is it in?"],
     ["{n} is in the constellation {const}.", "The star {n} belongs to the constellation "
      "{const}."], "its constellation, {const}"),
    ("planet", "about", ["Tell me about the planet {n}.", "Tell me about {n}.",
                         "What is {n} like?"], ["Tell me more about it."], None,
     "its main facts"),
    ("planet", "moons", ["How many moons does {n} have?", "Does {n} have moons?"],
     ["How many moons does it have?"], None, "its moon count, {moon_count}"),
    ("planet", "atm", ["Does {n} have an atmosphere?", "Is there air on {n}?"],
     ["Does it have an atmosphere?"], None, "whether it has an atmosphere"),
    ("planet", "period", ["How long is a year on {n}?", "What is the orbital period of {n}?"],
     ["How long is its year?"],
     ["A year on {n} lasts {period} days.", "{n} takes {period} days to orbit {star}."],
     "its orbital period, {period} days"),
    ("city", "about", ["Tell me about the city {n}.", "Tell me about {n}.", "What is {n}?"],
     ["Tell me more about it."], None, "its main facts"),
    ("city", "obs", ["Which observatory is in {n}?", "Is there an observatory in {n}?"],
     ["Which observatory is there?"],
     ["{n} is home to {obs}, which has a {tel} metre telescope.",
      "Yes. {obs} is in {n}. It was founded in {founded}."], "its observatory, {obs}"),
    ("city", "pop", ["How many people live in {n}?", "What is the population of {n}?"],
     ["How many people live there?"],
     ["About {pop} people live in {n}.", "{n} has a population of about {pop}."],
     "its population, {pop}"),
    ("person", "about", ["Who is {n}?", "Tell me about {n}.", "Who was the astronomer {n}?"],
     ["Tell me more about {pro_obj}."], None, "{pro_poss} main facts"),
    ("person", "birth", ["When was {n} born?", "What year was {n} born?"],
     ["When was {pro} born?"],
     ["{n} was born in {birth}.", "{n} was born in {birth} and worked at {obs}."],
     "{pro_poss} birth year, {birth}"),
    ("person", "found", ["What did {n} discover?", "Which objects did {n} discover?"],
     ["What did {pro} discover?"],
     ["{n} discovered {found}.", "The discoveries of {n} include {found}."],
     "{pro_poss} discoveries"),
]
ENTITY_SPECIAL = {  # answers that depend on the facts, not only on fields
    ("star", "planets"): lambda rng, e, f: (
        f"{e.name} has {f['n_planets']}: {f['planets']}." if e.planets else
        f"No planets are known around {e.name}."),
    ("planet", "moons"): lambda rng, e, f: (
        f"{e.name} has {f['moons']}." if e.moons else f"{e.name} has no moons."),
    ("planet", "atm"): lambda rng, e, f: (
        f"Yes, {e.name} has an atmosphere. It is {f['a_ptype']}." if e.atmosphere else
        f"No, {e.name} has no atmosphere. It is {f['a_ptype']}."),
}
INTROS = ["The user asks about {the_e}.", "The question is about {the_e}.",
          "This is a question about {the_e}."]
FOLLOW_INTROS = ["The user asks a follow-up question about {the_e}.",
                 "This follow-up is still about {the_e}."]
PLANS = ["I will answer briefly.", "I will answer in one or two sentences.",
         "I will give a short answer.", "I will keep the answer clear and simple."]
THANKS = ["Thank you!", "Thanks.", "Great, thanks!"]
WELCOME = ["You're welcome!", "You're welcome. Ask me anything else about the sky.",
           "Glad to help!"]


def the_entity(e):
    return {"star": "the star ", "magnetar": "the magnetar ", "planet": "the planet ",
            "city": "the city ", "person": ""}[e.kind] + e.name


def entity_fields(rng, e):
    f = facts(rng, e)
    if e.kind == "magnetar":
        f["a_mtype"] = f"{an(f['mtype_long'])} {f['mtype_long']}"
    if e.kind == "person":
        f.update(pro=e.gender, pro_obj="her" if e.gender == "she" else "him",
                 pro_poss="her" if e.gender == "she" else "his")
        if not e.discoveries:
            f["found"] = "no objects that are in my records"
    return f


def entity_answer(rng, qa, e, f):
    kind, key, _, _, answers, _ = qa
    if (kind, key) in ENTITY_SPECIAL:
        return ENTITY_SPECIAL[(kind, key)](rng, e, f)
    if answers is None:  # "tell me about": a short profile
        return " ".join(profile(rng, e, rng.randint(3, 5)))
    return pick(rng, answers, f)


def entity_round(rng, w, qa, e, follow):
    """(question, answer, reasoning) for one question about entity e."""
    kind, key, asks, follows, _, recall = qa
    f = entity_fields(rng, e)
    question = pick(rng, follows if follow else asks, f)
    answer = entity_answer(rng, qa, e, f)
    intro = pick(rng, FOLLOW_INTROS if follow else INTROS, {"the_e": the_entity(e)})
    reasoning = f"{intro} I know {recall.format(**f)}. {rng.choice(PLANS)}"
    return question, answer, reasoning


def generic_round(rng):
    asks, topics, phrase = rng.choice(GENERIC_QA)
    answer = " ".join(general_sentences(rng, topics, rng.randint(2, 4), lead=True))
    reasoning = rng.choice([
        f"The user asks a general question about {phrase}. I will explain it in a few sentences.",
        f"This is a question about {phrase}. I know the basic facts and will give a short, "
        f"clear answer.",
        f"The user wants to know about {phrase}. I will start with the main idea."])
    return rng.choice(asks), answer, reasoning


LIST_QA = [  # questions about groups in the world
    ("constellation_magnetars", ["Which magnetars are in the constellation {c}?",
                                 "Are there magnetars in {c}?"]),
    ("constellation_stars", ["Which stars are in the constellation {c}?",
                             "Name the stars of {c}."]),
    ("compare", ["Which has the stronger magnetic field, {a} or {b}?",
                 "Which spins faster, {a} or {b}?", "Which is closer to Earth, {a} or {b}?",
                 "Which was discovered first, {a} or {b}?"]),
]


def list_round(rng, w):
    key, asks = rng.choice(LIST_QA)
    if key == "compare":
        x, y = rng.sample(w.magnetars, 2)
        i = rng.randrange(len(asks))
        prop = ["field", "period", "distance", "year"][i]
        answer, _, _ = compare_magnetars(rng, x, y, prop, direct=True)
        question = asks[i].format(a=x.name, b=y.name)
        reasoning = (f"The user wants to compare {x.name} and {y.name}. "
                     f"I know both values, so I can say which one wins.")
        return question, answer, reasoning
    c = rng.choice(w.constellations)
    question = rng.choice(asks).format(c=c.name)
    if key == "constellation_magnetars":
        if c.magnetars:
            answer = (f"There {'is' if len(c.magnetars) == 1 else 'are'} "
                      f"{plural(len(c.magnetars), 'magnetar')} in {c.name}: "
                      f"{join_list(m.name for m in c.magnetars)}.")
        else:
            answer = f"No magnetars are known in the constellation {c.name}."
        reasoning = f"The user asks about the magnetars of {c.name}. I will list the ones I know."
    else:
        if c.stars:
            answer = (f"The stars of {c.name} that I know are "
                      f"{join_list(s.name for s in c.stars)}.")
        else:
            answer = f"I know no named stars in the constellation {c.name}."
        reasoning = f"The user asks about the stars of {c.name}. I will list them."
    return question, answer, reasoning


def chat_round(rng, w):
    """A first round: generic, about one entity, or about a group. Returns (q, a, r, qa, e)."""
    r = rng.random()
    if r < 0.25:
        return generic_round(rng) + (None, None)
    if r < 0.37:
        return list_round(rng, w) + (None, None)
    qa = rng.choice(ENTITY_QA)
    e = rng.choice(w.by_kind[qa[0]])
    return entity_round(rng, w, qa, e, follow=False) + (qa, e)


def first_sentence(text):
    """The text up to its first sentence end ('. ' before a capital letter)."""
    for i in range(len(text) - 2):
        if text[i] in ".!?" and text[i + 1] == " " and text[i + 2].isupper():
            return text[:i + 1]
    return text


def make_chat(rng, w):
    mode = "think" if rng.random() < 0.5 else "nothink"
    messages = []
    if rng.random() < 0.2:
        messages.append({"role": "system", "content": rng.choice(CHAT_SYSTEMS)})
    rounds = []
    q, a, r, qa, e = chat_round(rng, w)
    rounds.append((q, a, r))
    if rng.random() < 0.25:  # a second round
        if e is not None and rng.random() < 0.7:
            options = [x for x in ENTITY_QA if x[0] == e.kind and x is not qa]
            rounds.append(entity_round(rng, w, rng.choice(options), e, follow=True))
        elif rng.random() < 0.5:
            rounds.append((rng.choice(THANKS), rng.choice(WELCOME),
                           "The user thanks me. I will reply politely."))
        else:
            rounds.append(chat_round(rng, w)[:3])
    concise = bool(messages) and messages[0]["content"] == CONCISE
    for i, (q, a, r) in enumerate(rounds):
        if concise:
            a = first_sentence(a)
        messages.append({"role": "user", "content": q})
        reply = {"role": "assistant", "content": a}
        if mode == "think" and i == len(rounds) - 1:
            reply["reasoning_content"] = r
        messages.append(reply)
    return {"mode": mode, "messages": messages}
