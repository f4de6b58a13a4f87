"""Writing: stories, emails, poems, occasion pieces, and summaries of composed passages."""

from __future__ import annotations

import random

from tools.promptgen.design import Pool, Template, fill, lines
from tools.promptgen.passages import SUBJECTS, Subject, passage
from tools.promptgen.words import LIGHT_MODIFIERS, NAMES, TONES, TOWNS

PREMISES = lines("""
a lighthouse keeper who finds a message in a bottle addressed to her
a robot vacuum that becomes afraid of the dark
two rival bakers forced to share one oven
a child who can hear what houseplants think
the last bus of the night taking a strange detour
a retired astronaut learning to garden
a town where it has rained for a hundred days
a lost dog finding its way home across a city
a librarian who discovers a book that writes itself
a chess match that lasts forty years
a ferry captain on her final crossing
a translator who mistranslates one word at a peace talk
twins who swap places on their first day of work
a street musician who plays only for one person
a family moving into a house with a locked room
a grandmother teaching a teenager to drive
a mapmaker asked to draw a country that doesn't exist yet
a snowstorm that traps strangers in a railway station
an old clock repairer and a very impatient customer
a beekeeper whose bees disappear overnight
a night-shift nurse and a patient who won't sleep
a boy who builds a raft to reach an island he can see from school
a chef who loses her sense of taste before a competition
a hiker who keeps meeting the same stranger on different mountains
a village that votes to abolish clocks
a photographer who finds her own face in a hundred-year-old picture
a postman delivering letters that were never sent
a small café that only opens when it snows
an inventor whose machine solves the wrong problem
a girl who trains a crow to carry messages
a wedding where every guest has a secret
a tailor sewing a suit for someone he has never met
a lighthouse that starts blinking in morse code
a goalkeeper facing the last penalty of his career
a farmer who grows a pumpkin the size of a car
a museum guard who talks to the paintings after closing
two pen-pals who finally meet at an airport
a violin that plays only sad songs
a firefighter's day off that goes wrong
a cat that adopts a new family every winter
a radio host receiving calls from the future
a city garden planted in abandoned shopping trolleys
an elderly man entering his first marathon
a ghost who is afraid of people
a spaceship cook running out of spices
a teacher on the last day before retirement
a mountain rescue dog's first winter
a family recipe that nobody can get quite right
a courier who delivers a parcel to the wrong planet
a forgotten umbrella passed between strangers
""")

EMAIL_SITUATIONS = lines("""
asking my landlord to fix a broken boiler
declining a wedding invitation politely
asking my manager for a day off next Friday
following up on a job application after two weeks
complaining about a delayed online order
thanking a colleague who covered my shift
telling a client a project will be a week late
asking a professor for an extension on an essay
inviting neighbours to a street party
requesting a refund for a cancelled class
introducing two friends who should meet professionally
reminding the team about a deadline
apologising for missing a meeting
asking a plumber for a quote
resigning from a part-time job on good terms
asking a school to change my child's lunch plan
welcoming a new member to a club
asking for feedback after a rejected interview
proposing a new weekly meeting time
telling a supplier that the last delivery was damaged
asking the council about bin collection days
congratulating a former teacher on retiring
cancelling a gym membership
asking a shop whether an item is back in stock
responding to a customer who left a bad review
asking a neighbour to trim an overhanging tree
confirming the details of a holiday rental
asking a friend to return a borrowed book
volunteering for a charity event
announcing a price increase to regular customers
""")

POEM_SUBJECTS = lines("""
the first frost of the year
a kettle coming to the boil
commuters on a rainy platform
a grandparent's garden
the sound of a typewriter
a fox crossing a car park at night
the last day of summer holidays
an empty swimming pool in winter
bread rising in a warm kitchen
a lighthouse in fog
a bicycle left in the rain
moving house
a cat asleep in a sunbeam
the night before an exam
a thunderstorm over the sea
a library at closing time
learning to swim
an old pair of boots
the moon over a building site
a queue at a bakery
a city waking up
a letter from a friend far away
autumn leaves in a gutter
a train crossing a bridge
the smell of cut grass
a snowman melting
a busy hospital corridor at 3 a.m.
a jar of buttons
a beach after the tourists leave
a clock that has stopped
the first day at a new school
a market on Saturday morning
a heron standing in a river
a phone that never rings
a tree that survived a storm
a kitchen table after a family dinner
""")

OCCASIONS = lines("""
the retirement of a school caretaker after 30 years
the opening of a community garden
a best friend's 40th birthday
a colleague leaving for a job abroad
the launch of a small bookshop
a sports team that just lost the final
a grandmother's 90th birthday
a volunteer awards evening
the first day of a new cohort of apprentices
the reopening of a restored cinema
a charity bake sale
a farewell to a much-loved family dog
a street renamed after a local nurse
the end-of-season dinner of a rowing club
a couple's 25th wedding anniversary
a school science fair
a new playground opening
a neighbour who helped everyone during a flood
""")

_STORY = {
    "short-story": "Write a short story about {p}.",
    "word-limit": "Write a story of about {n} words about {p}.",
    "first-person": "Write a first-person story about {p}.",
    "genre": "Write a {genre} story about {p}.",
    "twist": "Write a short story about {p} that ends with a twist.",
    "for-kids": "Write a bedtime story for a six-year-old about {p}.",
    "opening": "Write only the opening paragraph of a novel about {p}.",
    "dialogue": "Write a scene about {p}, told entirely in dialogue.",
    "diary": "Write a series of three diary entries from the point of view of someone in this situation: {p}.",
    "micro": "Write a fifty-word micro-story about {p}.",
    "outline": "Outline a five-chapter plot about {p}, one line per chapter.",
    "setting": "Write a story about {p}, set in {town}, and make the place feel real.",
}
_GENRES = ("funny", "mystery", "science-fiction", "heart-warming", "spooky", "adventure", "fairy-tale")

_EMAIL = {
    "write": "Write an email {e}.",
    "tone": "Write a {tone} email {e}.",
    "short": "Draft a short email (under 120 words) {e}.",
    "subject-lines": "Suggest five subject lines for an email {e}, then write the email.",
    "two-versions": "Write two versions of an email {e}: one formal, one friendly.",
    "signed": "Write an email {e}. Sign it from {name}.",
    "text-message": "Instead of an email, write a polite text message {e}.",
    "improve": "I need to write an email {e}, but I always sound too abrupt. Write one that sounds kind and clear.",
}

_POEM = {
    "haiku": "Write a haiku about {x}.",
    "limerick": "Write a limerick about {x}.",
    "sonnet": "Write a sonnet about {x}.",
    "free-verse": "Write a short free-verse poem about {x}.",
    "couplets": "Write four rhyming couplets about {x}.",
    "acrostic": "Write an acrostic poem about {x}, using the word {word}.",
    "childrens": "Write a bouncy rhyming poem for children about {x}.",
    "two-moods": "Write two very short poems about {x}: one happy, one melancholy.",
    "song-chorus": "Write a chorus for a folk song about {x}.",
}
_ACROSTIC = ("LIGHT", "HOME", "RAIN", "TIME", "SEA", "BREAD", "DAWN", "WIND")

_OCCASION = {
    "speech": "Write a two-minute speech for {o}.",
    "toast": "Write a short toast for {o}.",
    "card": "Write a message for a card for {o}.",
    "announcement": "Write a short announcement for a newsletter about {o}.",
    "social-post": "Write a social media post about {o}.",
    "invitation": "Write an invitation to an event marking {o}.",
}

_SUMMARY = {
    "one-sentence": "Summarise this in one sentence:\n\n{text}",
    "bullets": "Summarise the following passage in {k} bullet points.\n\n{text}",
    "headline": "Write a newspaper headline and a two-sentence standfirst for this text:\n\n{text}",
    "for-child": "Explain what this passage says to a ten-year-old.\n\n{text}",
    "tldr": "TL;DR this for me:\n\n{text}",
    "key-facts": "Read the passage and list the key facts with their numbers.\n\n{text}",
    "main-point": "What is the main point of this passage, and what is just detail?\n\n{text}",
    "question-gen": "Write three questions a reader could answer from this passage.\n\n{text}",
}


def _premise(key: str, template: str) -> Template:
    def render(p: str, rng: random.Random) -> str:
        return fill(template, rng, p=p, n=str(rng.choice((100, 200, 300, 500, 800))), genre=_GENRES, town=TOWNS)

    return Template(key, render)


def _email(key: str, template: str) -> Template:
    return Template(key, lambda e, rng: fill(template, rng, e=e, tone=TONES, name=NAMES))


def _poem(key: str, template: str) -> Template:
    return Template(key, lambda x, rng: fill(template, rng, x=x, word=_ACROSTIC))


def _occasion(key: str, template: str) -> Template:
    return Template(key, lambda o, rng: fill(template, rng, o=o))


def _summary(key: str, template: str) -> Template:
    def render(subject: Subject, rng: random.Random) -> str:
        _, text = passage(subject, rng)
        return template.format(text=text, k=rng.choice((2, 3, 4, 5)))

    return Template(key, render)


POOLS = (
    Pool("writing.story", "writing", PREMISES, tuple(_premise(k, t) for k, t in _STORY.items()), share=0.3,
         topic_key=lambda p: "premise:" + p, modifiers=LIGHT_MODIFIERS[2:], modifier_rate=0.2),
    Pool("writing.email", "writing", EMAIL_SITUATIONS, tuple(_email(k, t) for k, t in _EMAIL.items()), share=0.2,
         topic_key=lambda e: "email:" + e),
    Pool("writing.poem", "writing", POEM_SUBJECTS, tuple(_poem(k, t) for k, t in _POEM.items()), share=0.15,
         topic_key=lambda x: "poem:" + x),
    Pool("writing.occasion", "writing", OCCASIONS, tuple(_occasion(k, t) for k, t in _OCCASION.items()), share=0.1,
         topic_key=lambda o: "occasion:" + o, modifiers=LIGHT_MODIFIERS, modifier_rate=0.3),
    Pool("writing.summary", "writing", SUBJECTS, tuple(_summary(k, t) for k, t in _SUMMARY.items()), share=0.25,
         topic_key=lambda s: s.key),
)
