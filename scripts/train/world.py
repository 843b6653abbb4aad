"""The invented world of the training corpus, and the facts that can be stated about it.

What this file owns: the small text helpers every generator uses (number words, lists, dates,
connectives); the World built from the seed (countries, constellations, 40 stars, 25
magnetars, 30 planets, 25 cities with their observatories, 40 astronomers, and the little file
system the file tools see); facts(), the template fields of one entity, with the references
("it", "the star", a surname) used after its first mention; and the fixed general sentences
about magnetars, neutron stars, stars and planets that hold in every world.

What it does not own: sentence templates about one entity and the prose and chat documents
(corpus_text.py), agent transcripts, the command line and file writing (corpus.py).

Determinism: the World draws only from random.Random("magnetar-corpus/{seed}/world"); every
other function draws from the rng it is given.
"""

import random

# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
GREEK = ["Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta", "Eta", "Theta", "Iota", "Kappa",
         "Lambda", "Sigma", "Tau", "Omega"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve"]

# Sentences may start with one of these words; after a connective they are lowercased.
LOWERABLE = {"It", "Its", "The", "She", "He", "Her", "His", "This", "These", "A", "An", "Many",
             "Most", "Some", "Astronomers", "Only", "At", "In", "When", "As", "Light", "After",
             "Close", "From", "Every", "No", "Each", "Magnetars", "So", "Born", "With", "By",
             "One", "Around", "Observations", "There", "Later", "Today", "Radio", "Giant",
             "Names", "Gas", "Rocky", "For", "Among", "About", "Yes", "Take"}
CONNECTIVES = ["In addition, ", "Also, ", "Moreover, ", "Besides, "]


def number_word(n):
    """Small counts in words, larger ones in digits."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else f"{n:,}"


def join_list(items):
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    if not items:
        return ""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def cap(text):
    return text[:1].upper() + text[1:]


def plural(n, word, many=None):
    return f"{number_word(n)} {word if n == 1 else (many or word + 's')}"


def fmt_date(rng, year, month, day):
    if rng.random() < 0.5:
        return f"{day} {MONTHS[month - 1]} {year}"
    return f"{MONTHS[month - 1]} {day}, {year}"


def add_connective(rng, sentence, p=0.15):
    """Sometimes prefixes an additive connective; only before a common first word, which is
    lowercased (a sentence that starts with a name keeps no connective)."""
    if rng.random() >= p:
        return sentence
    first, _, rest = sentence.partition(" ")
    if first not in LOWERABLE:
        return sentence
    return rng.choice(CONNECTIVES) + first.lower() + " " + rest


def paragraph(rng, sentences):
    out = [sentences[0]] + [add_connective(rng, s) for s in sentences[1:]]
    return " ".join(out)


def pick(rng, table, fields):
    """Formats one random template of a list with the given fields."""
    return rng.choice(table).format(**fields)


# --------------------------------------------------------------------------------------------
# The world
# --------------------------------------------------------------------------------------------

ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "br", "dr",
          "gr", "kr", "tr", "st", "th", "sh", "c", "j", "z", "w"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "a", "e"]
SUFFIXES = {
    "star": ["ar", "en", "is", "or", "ion", "el", "ax", "ira", "on", "eth"],
    "constellation": ["a", "us", "is", "ix", "ara", "ona", "ion"],
    "city": ["en", "holm", "ford", "by", "ton", "mere", "gate", "wick", "dal", "port"],
    "country": ["ia", "and", "mark", "or", "istan", "ary"],
    "surname": ["er", "en", "sson", "ova", "ard", "ley", "ik", "ani", "ez", "ström"],
    "place": ["stone", "field", "crest", "moor", "ridge"],
}
FIRST_NAMES = {
    "she": ["Mara", "Ilse", "Anya", "Lena", "Petra", "Sara", "Nina", "Rhea", "Vera", "Ada",
            "Elin", "Tove", "Irene", "Lucia", "Hana", "Maja", "Oda", "Greta", "Noor", "Kaia"],
    "he": ["Tomas", "Oren", "Jonas", "Emil", "Karl", "Ivo", "Anton", "Felix", "Hugo", "Leon",
           "Milo", "Otto", "Pavel", "Rafael", "Soren", "Viktor", "Arno", "Bruno", "Dario", "Erik"],
}
SPECTRAL = [  # letter, weight, colour, temperature range in kelvin
    ("O", 1, "blue", 30000, 45000),
    ("B", 3, "blue-white", 10000, 30000),
    ("A", 4, "white", 7500, 10000),
    ("F", 5, "yellow-white", 6000, 7500),
    ("G", 7, "yellow", 5200, 6000),
    ("K", 8, "orange", 3700, 5200),
    ("M", 9, "red", 2400, 3700),
]
PLANET_KINDS = [  # kind, weight, period range in days, moon range, atmosphere probability
    ("rocky planet", 5, (2, 420), (0, 2), 0.5),
    ("gas giant", 3, (200, 6000), (3, 40), 1.0),
    ("ice giant", 2, (3000, 30000), (2, 18), 1.0),
    ("ocean world", 1, (80, 500), (0, 3), 1.0),
]
OBSERVATORY_KINDS = ["Observatory", "Hill Observatory", "Radio Observatory", "Mountain Observatory"]
SKIES = ["clear", "cloudy", "partly cloudy", "rainy", "foggy", "windy", "stormy"]


def an(word):
    """Article for a word or a spectral letter ('an O-type', 'an F-type', 'a G-type')."""
    if word[:1] in "AEIOUaeiou" or word[:2] in ("F-", "M-", "H-", "L-", "N-", "R-", "S-", "X-"):
        return "an"
    return "a"


class Entity:
    """A plain record; attributes are set by the world builder."""

    def __init__(self, kind, name, **attrs):
        self.kind = kind
        self.name = name
        self.__dict__.update(attrs)


class World:
    """The invented world: every fact any generator states comes from here."""

    def __init__(self, seed):
        rng = random.Random(f"magnetar-corpus/{seed}/world")
        self.used_names = set()
        self.countries = [Entity("country", self._name(rng, "country", rng.choice([1, 2])))
                          for _ in range(8)]
        self.constellations = [Entity("constellation", self._name(rng, "constellation", 2),
                                      stars=[], magnetars=[]) for _ in range(12)]
        self._make_cities(rng)
        self._make_people(rng)
        self._make_stars(rng)
        self._make_planets(rng)
        self._make_magnetars(rng)
        self._assign_discoveries(rng)
        self.files, self.folders = build_file_system(rng, self)
        self.by_kind = {"star": self.stars, "magnetar": self.magnetars, "planet": self.planets,
                        "city": self.cities, "person": self.people}

    # -- names ---------------------------------------------------------------------------

    def _name(self, rng, kind, syllables):
        """A new pronounceable name: syllables of onset + vowel, then a suffix of the kind."""
        while True:
            parts = [rng.choice(ONSETS) if rng.random() < 0.8 else "", rng.choice(VOWELS)]
            for _ in range(syllables - 1):
                parts += [rng.choice(ONSETS), rng.choice(VOWELS)]
            suffix = rng.choice(SUFFIXES[kind])
            if suffix[0] in "aeiou":
                parts.append(rng.choice(ONSETS))
            name = cap("".join(parts) + suffix)
            if 4 <= len(name) <= 9 and name not in self.used_names:
                self.used_names.add(name)
                return name

    # -- builders --------------------------------------------------------------------------

    def _make_cities(self, rng):
        self.cities = []
        for _ in range(25):
            name = self._name(rng, "city", rng.choice([1, 1, 2]))
            country = rng.choice(self.countries)
            where = name if rng.random() < 0.6 else self._name(rng, "place", 1)
            obs = Entity("observatory", f"{where} {rng.choice(OBSERVATORY_KINDS)}",
                         telescope=rng.choice([0.8, 1.0, 1.2, 1.5, 1.8, 2.0, 2.4, 3.5, 4.0, 6.5]),
                         founded=rng.randint(1870, 1990))
            city = Entity("city", name, country=country,
                          population=rng.randint(40, 3000) * 1000,
                          observatory=obs, base_temp=rng.randint(-4, 22), people=[])
            obs.city = city
            self.cities.append(city)

    def _make_people(self, rng):
        self.people = []
        firsts = {g: list(names) for g, names in FIRST_NAMES.items()}
        for g in firsts:
            rng.shuffle(firsts[g])
        for i in range(40):
            gender = "she" if i % 2 == 0 else "he"
            first = firsts[gender].pop()
            last = self._name(rng, "surname", rng.choice([1, 2]))
            city = rng.choice(self.cities)
            person = Entity("person", f"{first} {last}", first=first, last=last, gender=gender,
                            birth=rng.randint(1850, 1985), city=city, discoveries=[])
            city.people.append(person)
            self.people.append(person)

    def _make_stars(self, rng):
        self.stars = []
        weights = [w for _, w, *_ in SPECTRAL]
        for _ in range(40):
            letter, _, colour, t_lo, t_hi = rng.choices(SPECTRAL, weights)[0]
            sub = rng.randint(0, 9)
            temp = int(round((t_hi - (t_hi - t_lo) * sub / 10) / 100.0)) * 100
            const = rng.choice(self.constellations)
            star = Entity("star", self._name(rng, "star", rng.choice([1, 2, 2])),
                          letter=letter, cls=f"{letter}{sub}", colour=colour, temp=temp,
                          distance=rng.choice([rng.randint(4, 60), rng.randint(20, 400),
                                               rng.randint(100, 2000)]),
                          const=const, planets=[])
            const.stars.append(star)
            self.stars.append(star)

    def _make_planets(self, rng):
        self.planets = []
        hosts = rng.sample(self.stars, 15)
        weights = [w for _, w, *_ in PLANET_KINDS]
        for i in range(30):
            star = hosts[i % len(hosts)] if i < len(hosts) * 2 else rng.choice(hosts)
            letter = "bcdefgh"[len(star.planets)]
            kind, _, (p_lo, p_hi), (m_lo, m_hi), p_atm = rng.choices(PLANET_KINDS, weights)[0]
            planet = Entity("planet", f"{star.name} {letter}", star=star, ptype=kind,
                            period=rng.randint(p_lo, p_hi), moons=rng.randint(m_lo, m_hi),
                            atmosphere=rng.random() < p_atm)
            star.planets.append(planet)
            self.planets.append(planet)
        for star in self.stars:  # inner planets first: sort each system by orbital period
            star.planets.sort(key=lambda p: p.period)
            for letter, planet in zip("bcdefgh", star.planets):
                planet.name = f"{star.name} {letter}"

    def _make_magnetars(self, rng):
        self.magnetars = []
        names = [(c, g) for c in self.constellations for g in GREEK]
        for const, greek in rng.sample(names, 25):
            kind = "SGR" if rng.random() < 0.55 else "AXP"
            exp = 14 if rng.random() < 0.75 else 15
            mant = rng.randint(1, 9) if exp == 14 else rng.randint(1, 2)
            mag = Entity("magnetar", f"{const.name} {greek}", const=const, mtype=kind,
                         desig=f"{kind} {rng.randint(1000, 2359)}{rng.choice('+-')}"
                               f"{rng.randint(10, 65)}",
                         field_m=mant, field_e=exp,
                         period=round(rng.uniform(1.5, 12.0), 1),
                         distance=rng.randint(30, 500) * 100,
                         age=rng.randint(1, 20) * 1000, flare=None)
            const.magnetars.append(mag)
            self.magnetars.append(mag)

    def _assign_discoveries(self, rng):
        """Gives every star, planet and magnetar a discoverer old enough to find it."""
        windows = {"star": (1890, 1975), "magnetar": (1975, 2024), "planet": (1992, 2025)}
        pending = {"star": list(self.stars), "magnetar": list(self.magnetars),
                   "planet": list(self.planets)}
        for kind in pending:
            rng.shuffle(pending[kind])

        def active(person, kind):
            lo, hi = windows[kind]
            return max(lo, person.birth + 25), min(hi, person.birth + 75)

        def can(person, kind):
            lo, hi = active(person, kind)
            return lo <= hi

        def give(person, obj):
            lo, hi = active(person, obj.kind)
            year = rng.randint(lo, hi)
            month = rng.randint(1, 12)
            obj.date = (year, month, rng.randint(1, MONTH_DAYS[month - 1]))
            obj.year = year
            obj.discoverer = person
            person.discoveries.append(obj)

        people = list(self.people)
        rng.shuffle(people)
        for person in people:  # first pass: one object each
            kinds = [k for k in pending if pending[k] and can(person, k)]
            if kinds:
                give(person, pending[rng.choice(kinds)].pop())
        for kind, objs in pending.items():
            for obj in objs:
                able = [p for p in self.people if can(p, kind)]
                give(person=rng.choice(able), obj=obj)
        for person in self.people:
            person.discoveries.sort(key=lambda o: o.date)
        for mag in self.magnetars:
            if rng.random() < 0.4:
                mag.flare = rng.randint(mag.year, 2025)


# --------------------------------------------------------------------------------------------
# The small file system the file tools see
# --------------------------------------------------------------------------------------------


def build_file_system(rng, w):
    """Returns ({path: (text, summary)}, {folder: [file names]}).

    A summary is a verb phrase that completes 'The file X ...' and states what the text says."""
    files = {}

    def add(path, lines, summary):
        files[path] = ("\n".join(lines) + "\n", summary)

    mags = rng.sample(w.magnetars, 5)
    add("data/magnetars.csv",
        ["name,field_gauss,period_s,distance_ly"] +
        [f"{m.name},{m.field_m}e{m.field_e},{m.period},{m.distance}" for m in mags],
        f"lists {number_word(len(mags))} magnetars ({join_list(m.name for m in mags)}) with "
        f"their magnetic fields, spin periods and distances")
    stars = rng.sample(w.stars, 6)
    add("data/stars.csv",
        ["name,class,distance_ly,constellation"] +
        [f"{s.name},{s.cls},{s.distance},{s.const.name}" for s in stars],
        f"is a table of {number_word(len(stars))} stars ({join_list(s.name for s in stars)}) "
        f"with their spectral classes, distances and constellations")
    planets = rng.sample(w.planets, 5)
    add("data/planets.csv",
        ["name,star,period_days,moons"] +
        [f"{p.name},{p.star.name},{p.period},{p.moons}" for p in planets],
        f"lists {number_word(len(planets))} planets ({join_list(p.name for p in planets)}) "
        f"with their orbital periods and moon counts")
    cities = rng.sample(w.cities, 5)
    add("data/observatories.csv",
        ["observatory,city,telescope_m,founded"] +
        [f"{c.observatory.name},{c.name},{c.observatory.telescope},{c.observatory.founded}"
         for c in cities],
        f"lists the observatories of {join_list(c.name for c in cities)} with the size of "
        f"their telescopes and the year each was founded")

    targets = rng.sample(w.magnetars + w.stars, 4)
    todo = [(f"Observe {targets[0].name} for two hours.", f"observe {targets[0].name}"),
            (f"Email {rng.choice(w.people).name} about the new data.",
             "send an email about the new data"),
            ("Clean the main mirror.", "clean the main mirror"),
            (f"Check the spin period of {rng.choice(w.magnetars).name}.",
             "check a spin period"),
            ("Back up the night logs.", "back up the night logs")]
    todo = rng.sample(todo, 4)
    add("notes/todo.txt", [f"- {line}" for line, _ in todo],
        f"is a to-do list with four items: {join_list(p for _, p in todo)}")
    month = rng.choice(MONTHS)
    add("notes/observing_plan.txt",
        [f"Targets for {month}:"] + [f"{t.name} ({t.kind})" for t in targets[1:]],
        f"plans observations of {join_list(t.name for t in targets[1:])} in {month}")
    person = rng.choice(w.people)
    mag = rng.choice(w.magnetars)
    day = rng.randint(1, 28)
    add("notes/meeting.txt",
        [f"Meeting with {person.name} on {day} {month}.",
         f"Topic: the magnetic field of {mag.name}.",
         "Decision: ask for more time on the X-ray telescope."],
        f"records a meeting with {person.name} on {day} {month} about the magnetic field of "
        f"{mag.name}; they decided to ask for more time on the X-ray telescope")
    add("notes/ideas.md",
        ["# Ideas", "- Compare the fields of all known magnetars.",
         "- Look for starquakes in old data.", "- Write a short guide for visitors."],
        "holds three ideas: compare the fields of all known magnetars, look for starquakes in "
        "old data, and write a short guide for visitors")

    for city in rng.sample(w.cities, 4):
        obs = city.observatory
        sky = rng.choice(SKIES)
        month = rng.choice(MONTHS)
        add(f"reports/{city.name.lower()}_visit.md",
            [f"# Visit to {obs.name}", f"We visited {obs.name} in {month}.",
             f"The main telescope is {obs.telescope} metres wide.",
             f"The weather was {sky} during our stay."],
            f"is a report on a visit to {obs.name} in {month}: the main telescope is "
            f"{obs.telescope} metres wide and the weather was {sky}")

    add("src/spin.py",
        ["def frequency(period_s):",
         "    \"\"\"Turns per second of a star with this spin period.\"\"\"",
         "    return 1.0 / period_s"],
        "defines a Python function named frequency that returns one divided by the spin period")
    add("src/distance.py",
        ["KM_PER_LIGHT_YEAR = 9.46e12", "", "def light_years_to_km(ly):",
         "    return ly * KM_PER_LIGHT_YEAR"],
        "defines a constant for the kilometres in a light year and a function that converts "
        "light years to kilometres")
    add("src/field.py",
        ["def stronger(a, b):", "    \"\"\"Returns the magnetar with the stronger field.\"\"\"",
         "    return a if a.field > b.field else b"],
        "defines a function named stronger that returns the magnetar with the stronger field")
    add("src/catalogue.py",
        ["import csv", "", "def load(path='data/magnetars.csv'):",
         "    with open(path) as f:", "        return list(csv.DictReader(f))"],
        "defines a function named load that reads data/magnetars.csv into a list of rows")

    for _ in range(3):
        year, month, day = rng.randint(2015, 2025), rng.randint(1, 12), rng.randint(1, 28)
        target = rng.choice(w.magnetars)
        start = rng.randint(19, 22)
        cloud = start + rng.randint(2, 4)
        path = f"logs/night_{year}_{month:02d}_{day:02d}.log"
        if path in files:
            continue
        add(path,
            [f"{start}:00 opened the dome", f"{start}:30 pointed the telescope at {target.name}",
             f"{cloud % 24:02d}:10 clouds arrived, closed the dome"],
            f"is an observing log from {day} {MONTHS[month - 1]} {year}: the dome opened at "
            f"{start}:00, the telescope was pointed at {target.name}, and clouds closed the dome "
            f"at {cloud % 24:02d}:10")

    folders = {}
    for path in sorted(files):
        folder, name = path.split("/")
        folders.setdefault(folder, []).append(name)
    folders["."] = [f"{f}/" for f in folders]
    return files, folders


# --------------------------------------------------------------------------------------------
# Facts as text: template fields per entity and references after the first mention
# --------------------------------------------------------------------------------------------


def field_text(rng, m):
    """A magnetar's field in one of several equivalent notations."""
    value = m.field_m * 10 ** (m.field_e - 12)  # in units of 10^12 gauss
    words = (f"{value // 1000:,} quadrillion gauss" if m.field_e == 15 else
             f"{value:,} trillion gauss")
    powers = f"{m.field_m} × 10^{m.field_e} gauss"
    return rng.choice([powers, powers, f"about {words}"])


def facts(rng, e):
    """Template fields for one entity (the few varying notations are drawn with rng)."""
    f = {"n": e.name}
    if e.kind == "star":
        f.update(cls=e.cls, a_type=f"{an(e.letter + '-')} {e.letter}-type", colour=e.colour,
                 temp=f"{e.temp:,}", dist=f"{e.distance:,}", const=e.const.name,
                 year=e.year, who=e.discoverer.name, obs=e.discoverer.city.observatory.name,
                 n_planets=plural(len(e.planets), "planet"),
                 planets=join_list(p.name for p in e.planets))
    elif e.kind == "magnetar":
        y, mo, d = e.date
        f.update(field=field_text(rng, e), period=f"{e.period}",
                 rpm=f"{60 / e.period:.1f}", dist=f"{e.distance:,}", const=e.const.name,
                 desig=e.desig, mtype_long="soft gamma repeater" if e.mtype == "SGR"
                 else "anomalous X-ray pulsar", year=y, date=fmt_date(rng, y, mo, d),
                 who=e.discoverer.name, obs=e.discoverer.city.observatory.name,
                 city=e.discoverer.city.name, age=f"{e.age:,}", flare=e.flare)
    elif e.kind == "planet":
        f.update(star=e.star.name, ptype=e.ptype, a_ptype=f"{an(e.ptype)} {e.ptype}",
                 period=f"{e.period:,}", moons=plural(e.moons, "moon"),
                 moon_count=number_word(e.moons), year=e.year, who=e.discoverer.name,
                 obs=e.discoverer.city.observatory.name, const=e.star.const.name,
                 dist=f"{e.star.distance:,}")
    elif e.kind == "city":
        o = e.observatory
        f.update(country=e.country.name, pop=f"{e.population:,}", obs=o.name,
                 tel=f"{o.telescope}", founded=o.founded,
                 people=join_list(p.name for p in e.people))
    elif e.kind == "person":
        f.update(first=e.first, last=e.last, birth=e.birth, city=e.city.name,
                 country=e.city.country.name, obs=e.city.observatory.name,
                 found=join_list(f"the {o.kind} {o.name}" for o in e.discoveries),
                 found_short=join_list(o.name for o in e.discoveries),
                 first_find=e.discoveries[0].name if e.discoveries else "",
                 first_year=e.discoveries[0].year if e.discoveries else "")
    return f


REFS = {  # (S, s, Poss, poss) forms used after the first mention; the pronoun comes first
    "star": [("It", "it", "Its", "its"), ("The star", "the star", "The star's", "the star's")],
    "magnetar": [("It", "it", "Its", "its"), ("The magnetar", "the magnetar", "The magnetar's",
                                               "the magnetar's")],
    "planet": [("It", "it", "Its", "its"), ("The planet", "the planet", "The planet's",
                                             "the planet's")],
    "city": [("It", "it", "Its", "its"), ("The city", "the city", "The city's", "the city's")],
}


def reference(rng, e, first):
    """Subject and possessive forms for the next sentence about e."""
    name = e.name
    if e.kind == "person":
        pro = ("She", "she", "Her", "her") if e.gender == "she" else ("He", "he", "His", "his")
        forms = [pro, pro, (e.last, e.last, e.last + "'s", e.last + "'s")]
    else:
        forms = list(REFS[e.kind])
    if first or rng.random() < 0.25:
        forms = [(name, name, name + "'s", name + "'s")]
    S, s, P, p = rng.choice(forms)
    # "o": the object after "of", "to", "from" ("the distance to the star"), never a pronoun
    if s not in ("it", "she", "he"):
        o = s
    else:
        o = e.last if e.kind == "person" else REFS[e.kind][1][1]
    return {"S": S, "s": s, "Poss": P, "poss": p, "o": o}


# --------------------------------------------------------------------------------------------
# General knowledge: sentences that hold in every world
# --------------------------------------------------------------------------------------------

GENERAL = {
    "definition": [
        "A magnetar is a neutron star with an extremely strong magnetic field.",
        "Magnetars are neutron stars whose magnetic fields are the strongest known in the "
        "universe.",
        "A magnetar is a kind of neutron star, the collapsed core that is left behind when a "
        "massive star explodes."],
    "formation": [
        "A magnetar forms when a massive star runs out of fuel, collapses and explodes as a "
        "supernova.",
        "The core that remains after the supernova is squeezed into a ball about twenty "
        "kilometres across.",
        "Some astronomers think that a very fast spin at birth helps to build the strong field "
        "of a magnetar."],
    "size": [
        "A neutron star packs more mass than the Sun into a sphere the size of a city.",
        "The matter in a neutron star is so dense that a spoonful of it would weigh billions "
        "of tonnes."],
    "field": [
        "The magnetic field of a magnetar can reach 10^15 gauss.",
        "A typical magnetar has a field of 10^14 to 10^15 gauss, about a thousand times "
        "stronger than that of an ordinary neutron star.",
        "The field of a magnetar is about a million billion times stronger than the magnetic "
        "field of Earth.",
        "Close to a magnetar, the field would be strong enough to pull atoms out of shape."],
    "starquake": [
        "The strong field puts great stress on the solid crust of the star.",
        "When the crust of a magnetar cracks, the event is called a starquake.",
        "A starquake can release a sudden burst of X-rays and gamma rays."],
    "bursts": [
        "Magnetars give off short bursts of X-rays and gamma rays that last a fraction of a "
        "second.",
        "A rare giant flare can release more energy in a fraction of a second than the Sun "
        "gives off in a hundred thousand years.",
        "Giant flares are so bright that they can disturb the upper atmosphere of Earth from "
        "across the galaxy."],
    "decay": [
        "The energy that powers a magnetar comes from the slow decay of its magnetic field.",
        "As the field decays, the star cools and its bursts become less frequent.",
        "After about ten thousand years, the field has weakened and the magnetar becomes quiet."],
    "spin": [
        "Magnetars spin slowly for neutron stars, turning once every two to twelve seconds.",
        "The strong field acts as a brake, so a magnetar slows down quickly."],
    "classes": [
        "Astronomers sort magnetars into two groups: soft gamma repeaters and anomalous X-ray "
        "pulsars.",
        "A soft gamma repeater is a magnetar known for repeated bursts of gamma rays.",
        "An anomalous X-ray pulsar is a magnetar that shines steadily in X-rays.",
        "Names that begin with SGR belong to soft gamma repeaters, and names that begin with "
        "AXP belong to anomalous X-ray pulsars."],
    "observing": [
        "Magnetars are studied with X-ray telescopes on satellites, because the atmosphere of "
        "Earth blocks X-rays.",
        "Radio telescopes on the ground can also pick up pulses from some magnetars.",
        "Only a few dozen magnetars are known in our galaxy."],
    "frb": ["Some fast radio bursts from distant galaxies may come from magnetars."],
    "neutron_star": [
        "A neutron star is made mostly of neutrons packed tightly together.",
        "A neutron star is the small, dense core left after a supernova."],
    "light_year": [
        "A light year is the distance that light travels in one year, about 9.5 trillion "
        "kilometres.",
        "Astronomers measure the distances to stars in light years."],
    "spectral": [
        "The spectral class of a star tells us its surface temperature and its colour.",
        "O and B stars are hot and blue, G stars like the Sun are yellow, and M stars are cool "
        "and red.",
        "The classes in order from hot to cool are O, B, A, F, G, K and M."],
    "planets": [
        "The orbital period of a planet is the length of its year.",
        "Gas giants are large planets made mostly of hydrogen and helium, and they often have "
        "many moons.",
        "Rocky planets are small worlds with solid surfaces."],
}
SINGLE_TOPICS = ("definition", "neutron_star")
MAGNETAR_TOPICS = ["definition", "formation", "size", "field", "starquake", "bursts", "decay",
                   "spin", "classes", "observing", "frb", "neutron_star"]


def general_sentences(rng, topics, k, lead=False):
    """Up to k distinct general sentences: one per topic in order, then more from the broad
    topics (definition and neutron_star give one sentence at most, so they do not repeat)."""
    if k <= 0:
        return []
    out = [rng.choice(GENERAL[t]) for t in topics]
    if lead and rng.random() < 0.6:  # answers often open with the topic's main sentence
        out[0] = GENERAL[topics[0]][0]
    more = [s for t in topics if t not in SINGLE_TOPICS for s in GENERAL[t] if s not in out]
    rng.shuffle(more)
    return (out + more)[:k]
