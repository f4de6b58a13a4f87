"""Short invented passages about invented subjects, composed from seeded facts.

Writing (summaries), rewriting, extraction and long-context prompts need text to work on. Every
passage here is written by homespec: a subject from SUBJECTS plus sentences drawn for its kind, with
names, years and numbers from the seed, so no passage is copied from anywhere.
"""

from __future__ import annotations

import random

from homespec.longprompts.material import PassageWords, Subject
from homespec.longprompts.render import Facts
from homespec.longprompts.render import passage as _render
from tools.promptgen.design import lines
from tools.promptgen.words import FILLERS

__all__ = ["SUBJECTS", "WORDS", "Facts", "Subject", "passage"]

SUBJECTS = tuple(
    Subject(*line.split("|"))
    for line in lines("""
company|Brightline Bicycles
company|Quill and Kettle Tea Company
company|Northwind Solar Cooperative
company|Marlow Hearing Aids
company|Tidewater Ferries
company|Copperleaf Furniture
company|Pebble Robotics
company|Saltbox Bakery Group
company|Greyfeather Outdoor Gear
company|Lumen Print Works
company|Harbourlight Insurance
company|Fernhill Dairy
company|Orbit Courier Service
company|Kiln and Clay Studios
company|Bramble Software
project|the Riverside Community Orchard
project|the Old Mill Repair Café
project|the Eastside Tool Library
project|the Canal Path Clean-up
project|the Night Bus Volunteers
project|the School Garden Exchange
project|the Hilltop Stargazing Club
project|the Library Seed Bank
project|the Winter Coat Drive
project|the Neighbourhood Reading Buddies
project|the Beach Plastic Survey
project|the Bicycle Kitchen
project|the Allotment Soup Kitchen
project|the Tenants' Solar Roof
project|the Pond Restoration Group
invention|the self-watering window box
invention|the folding rain shelter
invention|the solar kettle
invention|the pocket seed drill
invention|the talking bus-stop sign
invention|the hand-cranked washing drum
invention|the clip-on bicycle indicator
invention|the rainwater meter
invention|the insulated lunch crate
invention|the cordless soldering pen
invention|the braille label printer
invention|the frost alarm for greenhouses
invention|the modular bookshelf joint
invention|the quiet leaf blower
festival|the Lantern Walk
festival|the Harvest Kite Day
festival|the Midsummer Boat Parade
festival|the Apple Pressing Weekend
festival|the Winter Light Trail
festival|the Street Piano Week
festival|the River Raft Race
festival|the Cheese Rolling Fair
festival|the Chalk Art Festival
festival|the Night Market of Lanterns
festival|the Spring Seed Swap
festival|the Brass Band Contest
festival|the Storytelling Night
festival|the Snow Sculpture Weekend
building|the Old Corn Exchange
building|the Signal Box Museum
building|the Glasshouse Library
building|the Harbour Lighthouse
building|the Tannery Arts Centre
building|the Clock Tower Hall
building|the Copper Dome Observatory
building|the Railway Goods Shed
building|the Victoria Swimming Baths
building|the Windmill on Gallows Hill
building|the Weavers' Cottages
building|the Stone Bridge Inn
building|the Ice House
building|the Covered Market
creature|the marsh lantern beetle
creature|the ridge-backed river newt
creature|the copper-winged moth
creature|the dune hopping mouse
creature|the silver reed warbler
creature|the cave-dwelling blind shrimp
creature|the spotted meadow snail
creature|the long-eared hill bat
creature|the blue-footed heath lizard
creature|the whistling marsh frog
creature|the striped orchard bee
creature|the shore crab of the northern inlets
expedition|the Pellham Glacier Survey
expedition|the Long River Canoe Journey
expedition|the Salt Flats Weather Study
expedition|the High Moor Bird Count
expedition|the Coral Shelf Mapping Trip
expedition|the Desert Night Sky Census
expedition|the Island Lighthouse Tour
expedition|the Cave Temperature Project
expedition|the Forest Canopy Walkway Study
expedition|the Arctic Tern Tagging Season
expedition|the Mountain Hut Restoration
expedition|the Old Canal Survey
app|Penny, a budgeting app
app|Trailmate, a hiking app
app|Sproutly, a plant-care app
app|Busy Bee, a shared family calendar
app|Quietly, a noise-level app
app|Pantry, a meal-planning app
app|Lexi, a vocabulary app
app|Rideshare Ring, a lift-sharing app
app|Stepwise, a physiotherapy app
app|Tidy, a chore-sharing app
app|Lumen Notes, a note-taking app
app|Harbour, a mood journal
club|the Thursday Chess Circle
club|the Harbour Rowing Club
club|the Ashcombe Choir
club|the Wednesday Walkers
club|the Model Railway Society
club|the Sunday Sketching Group
club|the Riverside Running Club
club|the Allotment Society
club|the Table Tennis League
club|the Amateur Radio Club
club|the Beekeepers' Association
club|the Book Binding Circle
""")
)

# Sentences per kind. Slots: {s} subject, {S} capitalised subject, {town}, {p} {q} people, {y} year,
# {n} {m} numbers, {pct} percent, {thing} a kind-specific detail.
_COMMON = (
    "{S} is based in {town}.",
    "By {y2}, {p} had become the person most people associate with {s}.",
    "Not everyone was convinced at first; {q} called it \"a nice idea that will never last\".",
    "Today about {n} people are involved with {s} in one way or another.",
    "A local newspaper survey found that {pct}% of residents had heard of {s}.",
    "{S} has faced problems too, most recently {problem}.",
    "Plans for next year include {plan}.",
)
_KIND = {
    "company": (
        "{S} was founded in {y} by {p} in a rented garage.",
        "It now employs {n} people and sells mainly {thing}.",
        "Revenue grew by {pct}% last year, helped by a new contract in {town}.",
        "The company's best-selling product costs {m} euros and comes with a five-year guarantee.",
        "{q}, who runs the workshop, insists that every item is checked by hand.",
    ),
    "project": (
        "{S} started in {y} when {p} noticed {thing}.",
        "Volunteers meet every second Saturday, and around {m} turn up on a good day.",
        "The project runs on small grants and a yearly budget of about {n} euros.",
        "{q} keeps the records and publishes a short report each spring.",
        "So far the project says it has helped {n} households.",
    ),
    "invention": (
        "{S} was first sketched by {p} in {y}.",
        "It solves a simple problem: {thing}.",
        "The first prototype weighed {m} kilograms and was built from scrap parts.",
        "After {n} test units were handed out, {pct}% of testers said they would buy one.",
        "{q} later redesigned it so that it could be repaired with ordinary tools.",
    ),
    "festival": (
        "{S} was first held in {y}, when {p} persuaded the council to close the high street for a day.",
        "The highlight is {thing}.",
        "Last year about {n} visitors came, and {m} local stalls took part.",
        "{q} has organised the music stage for the past {m2} years.",
        "Entry is free, but visitors are asked to bring a lantern or a donation.",
    ),
    "building": (
        "{S} was built in {y} as {thing}.",
        "It stood empty for {m} years before {p} led a campaign to restore it.",
        "The restoration cost about {n} thousand euros, mostly raised by local donors.",
        "{q}, the current caretaker, gives tours on the first Sunday of each month.",
        "The original roof timbers were kept, and {pct}% of the bricks are original.",
    ),
    "creature": (
        "{S} was first described in {y} by the naturalist {p}.",
        "It is about {m} millimetres long and lives mainly in {thing}.",
        "Surveys estimate a population of around {n} in the wetlands near {town}.",
        "{q} has shown that its numbers drop by about {pct}% in very dry summers.",
        "It feeds at dusk and is most easily seen in late spring.",
    ),
    "expedition": (
        "{S} set out in {y}, led by {p}.",
        "The team of {m} people spent {m2} weeks in the field studying {thing}.",
        "They collected {n} measurements, many of them by hand in bad weather.",
        "{q} kept a diary that was later published as a short book.",
        "About {pct}% of their readings were later confirmed by satellite data.",
    ),
    "app": (
        "{S} was launched in {y} by a two-person team led by {p}.",
        "Its main feature is {thing}.",
        "It has about {n} active users and a rating of {rating} out of 5.",
        "A premium plan costs {m} euros a year; {pct}% of users pay for it.",
        "{q}, who handles support, answers every email personally.",
    ),
    "club": (
        "{S} was started in {y} by {p} and a handful of friends.",
        "Members meet weekly in {thing}.",
        "The club has {m} regular members and a waiting list of {m2}.",
        "Membership costs {n} euros a year, with a reduced rate for students.",
        "{q} has been club secretary for as long as anyone can remember.",
    ),
}
_THINGS = {
    "company": ("repairable bicycles", "loose-leaf tea", "rooftop solar panels", "small hearing aids", "ferry tickets",
                "oak tables", "teaching robots", "sourdough bread", "waterproof jackets", "posters and flyers",
                "home insurance", "organic milk", "same-day deliveries", "hand-thrown bowls", "scheduling software"),
    "project": ("that the old orchard was being cleared", "how many broken toasters ended up in skips",
                "that neighbours owned forty drills between them", "litter collecting along the towpath",
                "people stranded after the last bus", "that many pupils had never grown a vegetable"),
    "invention": ("plants dying while their owners are away", "sudden showers at bus stops",
                  "boiling water without electricity", "planting seeds in straight rows by hand",
                  "people missing their bus", "washing clothes without a machine", "signalling on a bicycle at night"),
    "festival": ("a procession of paper lanterns down to the river", "a kite contest on the hill",
                 "a parade of decorated boats", "the pressing of a tonne of apples", "a trail of light installations"),
    "building": ("a grain market", "a railway signal box", "a public library", "a working lighthouse",
                 "a leather tannery", "the town hall", "an observatory", "a goods shed", "public baths"),
    "creature": ("shallow reed beds", "fast cold streams", "old hedgerows", "coastal dunes", "limestone caves",
                 "damp meadows", "the walls of old orchards"),
    "expedition": ("how fast the glacier was retreating", "river temperatures", "rainfall on the salt flats",
                   "breeding birds on the moor", "the health of the coral shelf", "light pollution"),
    "app": ("a weekly spending summary", "offline trail maps", "watering reminders", "a calendar the whole family edits",
            "a noise meter that warns before it gets too loud", "a meal planner with a shopping list",
            "daily vocabulary cards", "matching drivers with neighbours going the same way",
            "short exercise videos from a physiotherapist", "a rota that rotates chores fairly",
            "notes that sync without an account", "a daily two-question mood check"),
    "club": ("the back room of the library", "the boathouse", "the church hall", "the community centre",
             "a café that stays open late for them", "the school gym"),
}
_PROBLEMS = ("a burst water pipe in January", "a dispute over parking", "a sharp rise in costs",
             "the loss of its main sponsor", "a week of storms", "a row about opening hours",
             "a software outage", "a shortage of volunteers")
_PLANS = ("a second site on the other side of town", "a course for beginners", "an open day in June",
          "new solar panels on the roof", "a partnership with the local school", "a small museum display")


_YEARS = {"app": (2009, 2024), "company": (1948, 2022), "project": (1975, 2023), "club": (1920, 2022)}


def _own_things() -> dict[str, str]:
    """Where a kind's detail list is written one per subject, each subject keeps its own detail."""
    out = {}
    for kind, things in _THINGS.items():
        same_kind = [x for x in SUBJECTS if x.kind == kind]
        if len(things) == len(same_kind):
            out |= {subject.key: thing for subject, thing in zip(same_kind, things)}
    return out


WORDS = PassageWords(
    common=_COMMON,
    sentences=_KIND,
    things=_THINGS,
    own_things=_own_things(),
    problems=_PROBLEMS,
    plans=_PLANS,
    years={kind: _YEARS.get(kind, (1890, 2021)) for kind in _KIND},
)


def passage(subject: Subject, rng: random.Random, n_sentences: int | None = None) -> tuple[Facts, str]:
    """A paragraph of 3-9 sentences about `subject` (homespec.longprompts.render.passage)."""
    return _render(subject, rng, FILLERS, WORDS, n_sentences)
