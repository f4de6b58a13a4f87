"""Maths and reasoning: word problems with seeded numbers, unit conversions, calculations, logic puzzles."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tools.promptgen.design import Pool, Template, lines
from tools.promptgen.words import NAMES, TOWNS


@dataclass(frozen=True, slots=True)
class Domain:
    """A setting for word problems: where it happens and what gets counted, bought or packed."""

    key: str
    place: str
    worker: str
    item: str
    items: str
    container: str
    price: tuple[int, int]  # whole currency units per item, low..high


def _d(spec: str) -> Domain:
    key, place, worker, item, items, container, lo, hi = (s.strip() for s in spec.split("|"))
    return Domain(key, place, worker, item, items, container, (int(lo), int(hi)))


DOMAINS = tuple(
    _d(s)
    for s in lines("""
bakery|a bakery|baker|loaf|loaves|basket|2|6
orchard|an apple orchard|picker|apple|apples|crate|1|2
bookshop|a second-hand bookshop|bookseller|paperback|paperbacks|box|3|9
garden-centre|a garden centre|gardener|seedling|seedlings|tray|1|4
bike-shop|a bicycle repair shop|mechanic|inner tube|inner tubes|bin|5|12
florist|a florist|florist|tulip|tulips|bunch|1|3
cafe|a small cafe|barista|muffin|muffins|tray|2|5
farm-eggs|a farm stall|farmer|egg|eggs|carton|1|1
stationery|a stationery shop|shop assistant|notebook|notebooks|pack|2|7
pottery|a pottery studio|potter|mug|mugs|shelf|8|20
toy-shop|a toy shop|shopkeeper|wooden train|wooden trains|box|6|15
pet-shop|a pet shop|keeper|bag of seed|bags of seed|pallet|3|8
cinema|a cinema|usher|ticket|tickets|booth|7|12
fishmonger|a fish market|fishmonger|mackerel|mackerel|ice box|2|6
tailor|a tailor's workshop|tailor|button|buttons|jar|1|1
ice-cream|an ice-cream van|vendor|cone|cones|freezer|2|4
print-shop|a print shop|printer|poster|posters|folder|3|10
hardware|a hardware store|clerk|box of screws|boxes of screws|shelf|4|9
school-fair|a school fair|volunteer|raffle ticket|raffle tickets|roll|1|2
library-sale|a library book sale|librarian|hardback|hardbacks|trolley|2|5
craft-market|a craft market|stallholder|candle|candles|crate|4|11
bottle-bank|a recycling centre|worker|glass bottle|glass bottles|cage|1|1
music-shop|a music shop|assistant|guitar string set|guitar string sets|drawer|6|14
deli|a deli counter|server|sandwich|sandwiches|platter|4|8
car-wash|a car wash|attendant|wash|washes|shift|8|15
laundry|a laundrette|attendant|load of washing|loads of washing|machine|3|6
sweet-shop|a sweet shop|shopkeeper|jar of sweets|jars of sweets|shelf|2|5
zoo-shop|a zoo gift shop|cashier|plush penguin|plush penguins|bin|9|18
greengrocer|a greengrocer|grocer|melon|melons|crate|2|4
vineyard|a vineyard|grower|bottle of juice|bottles of juice|case|5|12
""")
)

_CURRENCIES = ("dollars", "euros", "pounds", "francs", "crowns")


def _name_pair(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(NAMES, 2)
    return a, b


def _price(d: Domain, rng: random.Random) -> int:
    return rng.randint(d.price[0], d.price[1])


def _wp_change(d: Domain, rng: random.Random) -> str:
    n, p, cur, name = rng.randint(2, 9), _price(d, rng), rng.choice(_CURRENCIES), rng.choice(NAMES)
    note = next(v for v in (5, 10, 20, 50, 100, 200) if v > n * p)
    return f"{name} buys {n} {d.items} at {d.place} for {p} {cur} each and pays with a {note}-{cur[:-1]} note. How much change should {name} get?"


def _wp_pack(d: Domain, rng: random.Random) -> str:
    per, total = rng.randint(4, 12), rng.randint(30, 250)
    return f"The {d.worker} at {d.place} packs {total} {d.items} into {d.container}s that hold {per} each. How many {d.container}s are full, and how many {d.items} are left over?"


def _wp_rate(d: Domain, rng: random.Random) -> str:
    a, b = _name_pair(rng)
    ra, rb, goal = rng.randint(10, 40), rng.randint(10, 40), rng.randint(150, 900)
    return f"At {d.place}, {a} can prepare {ra} {d.items} an hour and {b} can prepare {rb}. Working together, how long will they take to prepare {goal} {d.items}? Give the answer in hours and minutes."


def _wp_percent(d: Domain, rng: random.Random) -> str:
    p, off, cur = rng.randint(d.price[0] * 10, d.price[1] * 10 + 10), rng.choice((10, 15, 20, 25, 30, 40)), rng.choice(_CURRENCIES)
    n = rng.randint(3, 12)
    return f"{d.place.capitalize()} usually charges {p} {cur} for a {d.container} of {d.items}. This week there is {off}% off. How much do {n} {d.container}s cost with the discount?"


def _wp_profit(d: Domain, rng: random.Random) -> str:
    cost, sale = rng.randint(1, 5), rng.randint(6, 15)
    fixed, cur = rng.randint(40, 400), rng.choice(_CURRENCIES)
    return f"The {d.worker} at {d.place} pays {cost} {cur} for each {d.item} and sells it for {sale} {cur}. Rent for the stall is {fixed} {cur} a day. How many {d.items} must be sold in a day to break even?"


def _wp_ratio(d: Domain, rng: random.Random) -> str:
    a, b = _name_pair(rng)
    x, y, total = rng.randint(1, 5), rng.randint(1, 5), rng.randint(4, 20) * 10
    return f"{a} and {b} share {total} {d.items} from {d.place} in the ratio {x}:{y}. How many does each of them get? If the split is not whole, say how you would handle the remainder."


def _wp_multi_step(d: Domain, rng: random.Random) -> str:
    start, sold1, sold2, delivered = rng.randint(80, 300), rng.randint(10, 60), rng.randint(10, 60), rng.randint(20, 120)
    day = rng.choice(("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"))
    return (
        f"On {day} morning {d.place} had {start} {d.items}. By noon it had sold {sold1}, a delivery brought "
        f"{delivered} more, and in the afternoon it sold {sold2}. Then a third of what was left was set aside "
        f"for an order. How many {d.items} are still available?"
    )


def _wp_average(d: Domain, rng: random.Random) -> str:
    days = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
    k = rng.randint(4, 6)
    counts = [rng.randint(12, 90) for _ in range(k)]
    listing = ", ".join(f"{day} {c}" for day, c in zip(days, counts))
    return f"{d.place.capitalize()} sold these numbers of {d.items}: {listing}. What was the mean per day, and which day was furthest from the mean?"


def _wp_estimate(d: Domain, rng: random.Random) -> str:
    hours, per_hour = rng.randint(5, 12), rng.randint(8, 45)
    return f"Roughly how many {d.items} does {d.place} get through in a year if it is open {hours} hours a day, six days a week, and handles about {per_hour} an hour? Show a quick estimate, then the exact figure."


def _wp_schedule(d: Domain, rng: random.Random) -> str:
    a, b = rng.randint(2, 6), rng.randint(3, 9)
    return f"At {d.place} one supplier delivers {d.items} every {a} days and another every {b} days. Both delivered today. In how many days will they next deliver on the same day?"


WORD_TEMPLATES = {
    "change": _wp_change,
    "pack": _wp_pack,
    "rate": _wp_rate,
    "percent-off": _wp_percent,
    "break-even": _wp_profit,
    "ratio": _wp_ratio,
    "multi-step": _wp_multi_step,
    "average": _wp_average,
    "estimate": _wp_estimate,
    "lcm-schedule": _wp_schedule,
}

_WORD_FRAMES = (
    "{q}",
    "{q} Show your working.",
    "{q} Explain each step in plain words.",
    "Solve this problem step by step: {q}",
    "{q} Check your answer at the end.",
    "Here is a word problem for my class. {q} Give the answer and a short explanation.",
)

# name|from unit|to unit|typical low|typical high
CONVERSIONS = lines("""
distance-km-mi|kilometres|miles|3|420
distance-mi-km|miles|kilometres|2|300
height-ft-cm|feet|centimetres|4|7
weight-kg-lb|kilograms|pounds|2|120
weight-lb-kg|pounds|kilograms|5|250
weight-oz-g|ounces|grams|2|40
volume-l-gal|litres|US gallons|5|80
volume-cup-ml|cups|millilitres|1|6
volume-tsp-ml|teaspoons|millilitres|1|12
temp-c-f|degrees Celsius|degrees Fahrenheit|-20|45
temp-f-c|degrees Fahrenheit|degrees Celsius|10|110
speed-kmh-ms|kilometres per hour|metres per second|10|130
speed-mph-kmh|miles per hour|kilometres per hour|15|90
speed-knots-kmh|knots|kilometres per hour|5|40
area-ha-acre|hectares|acres|1|60
area-m2-ft2|square metres|square feet|10|200
time-min-h|minutes|hours and minutes|75|1000
time-s-h|seconds|hours, minutes and seconds|4000|90000
time-days-weeks|days|weeks and days|10|400
data-mb-gb|megabytes|gigabytes|300|90000
data-gib-gb|gibibytes|gigabytes|1|512
energy-kwh-mj|kilowatt-hours|megajoules|1|50
energy-kcal-kj|kilocalories|kilojoules|80|2500
pressure-psi-bar|psi|bar|20|120
fuel-mpg-l100|miles per gallon|litres per 100 km|20|60
length-in-mm|inches|millimetres|1|30
length-yd-m|yards|metres|10|500
angle-deg-rad|degrees|radians|15|360
""")

_CONV_TEMPLATES = {
    "convert": "Convert {v} {a} to {b}.",
    "show-working": "How many {b} is {v} {a}? Show the conversion factor you use.",
    "context": "{name} reads a value of {v} {a} on an old label. What is that in {b}?",
    "table": "Make a small conversion table from {a} to {b} for {v}, {v2} and {v3} {a}.",
    "rule-of-thumb": "Give me a mental shortcut for converting {a} to {b}, and test it on {v} {a}.",
    "check": "My friend says {v} {a} is about {guess} {b}. Is that right?",
}


def _conv(key: str, template: str) -> Template:
    def render(spec: str, rng: random.Random) -> str:
        _, a, b, lo, hi = spec.split("|")
        lo_i, hi_i = int(lo), int(hi)
        v, v2, v3 = (rng.randint(lo_i, hi_i) for _ in range(3))
        return template.format(v=v, v2=v2, v3=v3, a=a, b=b, name=rng.choice(NAMES), guess=rng.randint(lo_i, hi_i))

    return Template(key, render)


def _calc_fraction(rng: random.Random) -> str:
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    return f"{a}/{b} {rng.choice('+-*')} {c}/{d}"


def _calc_percent(rng: random.Random) -> str:
    return f"{rng.choice((5, 12, 17.5, 20, 35, 62))}% of {rng.randint(40, 9000)}"


def _calc_expr(rng: random.Random) -> str:
    a, b, c, d = (rng.randint(2, 99) for _ in range(4))
    return f"{a} * ({b} - {c}) + {d} / {rng.choice((2, 4, 5, 8))}"


def _calc_equation(rng: random.Random) -> str:
    a, x, b = rng.randint(2, 12), rng.randint(-9, 15), rng.randint(-30, 30)
    return f"the value of x when {a}x + {b} = {a * x + b}"


def _calc_sequence(rng: random.Random) -> str:
    start, step, k = rng.randint(1, 20), rng.randint(2, 9), rng.choice(("add", "mul"))
    terms = [start + i * step for i in range(5)] if k == "add" else [start * (step // 2 + 2) ** i for i in range(5)]
    return "the next two terms of the sequence " + ", ".join(map(str, terms))


def _calc_geometry(rng: random.Random) -> str:
    shape = rng.choice(("circle", "rectangle", "right triangle", "cylinder"))
    if shape == "circle":
        return f"the area and circumference of a circle with radius {rng.randint(2, 40)} cm"
    if shape == "rectangle":
        return f"the diagonal of a rectangle {rng.randint(3, 30)} m by {rng.randint(3, 30)} m"
    if shape == "right triangle":
        return f"the hypotenuse of a right triangle with legs {rng.randint(3, 24)} and {rng.randint(3, 24)}"
    return f"the volume of a cylinder with radius {rng.randint(2, 15)} cm and height {rng.randint(5, 50)} cm"


def _calc_probability(rng: random.Random) -> str:
    red, blue = rng.randint(2, 9), rng.randint(2, 9)
    return f"the probability of drawing two red marbles without replacement from a bag with {red} red and {blue} blue marbles"


def _calc_interest(rng: random.Random) -> str:
    return f"the value of {rng.randint(5, 200) * 100} invested at {rng.choice((2, 3, 4.5, 5, 7))}% a year, compounded yearly, after {rng.randint(2, 30)} years"


def _calc_stats(rng: random.Random) -> str:
    xs = [rng.randint(1, 60) for _ in range(rng.randint(5, 9))]
    return "the mean, median and range of " + ", ".join(map(str, xs))


def _calc_powers(rng: random.Random) -> str:
    return f"{rng.randint(2, 9)}^{rng.randint(2, 8)} and the last digit of {rng.randint(2, 9)}^{rng.randint(20, 99)}"


def _calc_primes(rng: random.Random) -> str:
    return f"the prime factorisation of {rng.randint(60, 5000)}"


def _calc_time(rng: random.Random) -> str:
    h, m, dh, dm = rng.randint(0, 23), rng.randint(0, 59), rng.randint(1, 30), rng.randint(0, 59)
    return f"the clock time {dh} hours and {dm} minutes after {h:02d}:{m:02d}"


CALC_KINDS = {
    "fractions": _calc_fraction,
    "percent": _calc_percent,
    "order-of-operations": _calc_expr,
    "linear-equation": _calc_equation,
    "sequence": _calc_sequence,
    "geometry": _calc_geometry,
    "probability": _calc_probability,
    "compound-interest": _calc_interest,
    "statistics": _calc_stats,
    "powers": _calc_powers,
    "primes": _calc_primes,
    "clock": _calc_time,
}

_CALC_TEMPLATES = {
    "compute": "Compute {x}.",
    "what-is": "What is {x}? Explain each step.",
    "check-me": "I worked out {x} and got {wrong}. Am I right? If not, where did I go wrong?",
    "teach": "Teach me how to find {x}, as if I had forgotten the method.",
    "answer-only": "Find {x}. Give just the answer on the first line, then a one-line check.",
    "two-methods": "Find {x} in two different ways and confirm they agree.",
}

LOGIC_THEMES = lines("""
pets|a cat, a dog, a parrot and a tortoise
houses|a red house, a blue house, a green house and a yellow house
drinks|tea, coffee, cocoa and lemonade
sports|tennis, rowing, fencing and judo
instruments|a violin, a drum, a flute and a harp
jobs|a baker, a pilot, a nurse and a carpenter
fruit|a mango, a pear, a plum and a fig
vehicles|a bicycle, a van, a tram and a canoe
hobbies|painting, chess, pottery and archery
desserts|a tart, a trifle, a sorbet and a crumble
hats|a beret, a cap, a bowler and a beanie
plants|a fern, a cactus, an orchid and a bonsai
books|a mystery, an atlas, a cookbook and a poem collection
weekdays|Monday, Tuesday, Wednesday and Thursday
colours|scarlet, teal, amber and violet
rooms|the attic, the cellar, the kitchen and the study
""")


def _logic_order(theme: str, rng: random.Random) -> str:
    a, b, c, d = rng.sample(NAMES, 4)
    return (
        f"Four friends, {a}, {b}, {c} and {d}, finished a race. {a} finished before {b}. {c} was not last. "
        f"{d} finished immediately after {a}. {b} finished before {c} or {c} finished second. "
        "Work out the finishing order, or explain why more information is needed."
    )


def _logic_assign(theme: str, rng: random.Random) -> str:
    _, things = theme.split("|")
    a, b, c, d = rng.sample(NAMES, 4)
    first = things.split(", ")[0]
    return (
        f"{a}, {b}, {c} and {d} each have a different one of these: {things}. {a} does not have {first}. "
        f"{b} has the item listed last. {c}'s item comes alphabetically before {d}'s. "
        "Who has what? Explain your reasoning."
    )


def _logic_knights(theme: str, rng: random.Random) -> str:
    a, b = rng.sample(NAMES, 2)
    town = rng.choice(TOWNS)
    return (
        f"In {town} everyone either always tells the truth or always lies. {a} says: \"{b} and I are "
        f"{rng.choice(('both liars', 'of different kinds', 'both truth-tellers'))}.\" {b} says nothing. "
        f"What can you conclude about {a} and {b}?"
    )


def _logic_syllogism(theme: str, rng: random.Random) -> str:
    kind, things = theme.split("|")
    town = rng.choice(TOWNS)
    return (
        f"Suppose every club in {town} that plays {kind} meets on Saturdays, and some clubs that meet on "
        f"Saturdays serve {rng.choice(('soup', 'cake', 'pancakes'))}. Does it follow that some {kind} clubs "
        "serve it? Explain whether the conclusion is valid."
    )


def _logic_weigh(theme: str, rng: random.Random) -> str:
    n = rng.choice((8, 9, 12, 27))
    kind, _ = theme.split("|")
    return (
        f"A {kind} club has {n} identical-looking prize boxes, one slightly heavier, and a balance scale. "
        "What is the smallest number of weighings that guarantees you find it? Describe the strategy."
    )


def _logic_days(theme: str, rng: random.Random) -> str:
    k = rng.randint(2, 40)
    day = rng.choice(("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"))
    kind, _ = theme.split("|")
    return (
        f"The {kind} fair opens the day after tomorrow, which is a {day}. What day of the week was it "
        f"{k} days before yesterday? Reason it out."
    )


def _logic_river(theme: str, rng: random.Random) -> str:
    _, things = theme.split("|")
    items = things.replace(" and ", ", ").split(", ")
    return (
        f"A ferry can carry a person and one of these at a time: {items[0]}, {items[1]} and {items[2]}. "
        f"{items[0].capitalize()} cannot be left alone with {items[1]}, and {items[1]} cannot be left alone "
        f"with {items[2]}. How can everything cross the river?"
    )


LOGIC_TEMPLATES = {
    "race-order": _logic_order,
    "assignment": _logic_assign,
    "knights-knaves": _logic_knights,
    "syllogism": _logic_syllogism,
    "weighing": _logic_weigh,
    "day-arithmetic": _logic_days,
    "river-crossing": _logic_river,
}


def _word(key: str, fn) -> Template:
    return Template(key, lambda d, rng: rng.choice(_WORD_FRAMES).format(q=fn(d, rng)))


def _calc(key: str, template: str) -> Template:
    def render(kind: str, rng: random.Random) -> str:
        return template.format(x=CALC_KINDS[kind](rng), wrong=rng.randint(2, 999))

    return Template(key, render)


def _logic(key: str, fn) -> Template:
    return Template(key, fn)


POOLS = (
    Pool("maths.word", "maths", DOMAINS, tuple(_word(k, f) for k, f in WORD_TEMPLATES.items()), share=0.45,
         topic_key=lambda d: "domain:" + d.key),
    Pool("maths.units", "maths", CONVERSIONS, tuple(_conv(k, t) for k, t in _CONV_TEMPLATES.items()), share=0.15,
         topic_key=lambda s: "conversion:" + s.split("|")[0]),
    Pool("maths.calc", "maths", tuple(CALC_KINDS), tuple(_calc(k, t) for k, t in _CALC_TEMPLATES.items()), share=0.25,
         topic_key=lambda k: "calc:" + k),
    Pool("maths.logic", "maths", LOGIC_THEMES, tuple(_logic(k, f) for k, f in LOGIC_TEMPLATES.items()), share=0.15,
         topic_key=lambda t: "logic:" + t.split("|")[0]),
)
