"""Chat and advice: goals to plan for, concepts to explain, choices to weigh."""

from __future__ import annotations

import random

from tools.promptgen.design import Pool, Template, fill, lines
from tools.promptgen.words import AUDIENCES, GENERAL_MODIFIERS, NAMES

GOALS = lines("""
start running after years without exercise
learn to bake sourdough bread
keep houseplants alive in a dark flat
negotiate a pay rise
save for a deposit on a home
get better sleep while working shifts
learn to touch-type
start a vegetable patch on a balcony
prepare for a first job interview
stop procrastinating on a thesis
learn basic car maintenance
cook healthy meals on a tight budget
teach a dog to walk on a loose lead
organise a small wedding
move to a new city alone
learn to swim as an adult
reduce screen time in the evenings
start journaling
make friends after moving abroad
write a first novel
learn chess openings
train for a 10 km race
pay off a credit card
become a better listener
speak up more in meetings
declutter a small apartment
learn to draw portraits
keep a tidy desk at work
build a reading habit
plan a road trip with children
improve my handwriting
get started with birdwatching
learn sign language
care for an elderly parent while working
host a dinner party for twelve
switch careers into nursing
prepare a garden for winter
learn to play the ukulele
set up a home workshop
start a small podcast
reduce food waste at home
plan a budget for a gap year
get comfortable with public speaking
learn to meditate
fix a leaking tap
paint a room properly
choose a first telescope
learn a new language in a year
volunteer at a local charity
start a book club
make a weekly meal plan
learn to ride a bicycle as an adult
improve my posture at a desk
raise chickens in a back garden
prepare for a long-haul flight
build an emergency fund
learn to knit
write a good cover letter
stay motivated while studying alone
start composting
plan a camping trip in autumn
get back into a hobby I dropped
support a friend going through a breakup
teach my child to ride a bike
learn to sew simple repairs
brew good coffee at home
keep in touch with old friends
prepare for a driving test
learn the basics of photography
improve my memory for names
make my commute less stressful
plan a surprise birthday party
start strength training at home
adopt a rescue cat
learn to read music
take better notes in lectures
manage a team for the first time
handle a difficult neighbour
recover after a bad week at work
start lifting weights safely
cut down on caffeine
plan a week of vegetarian dinners
learn to juggle
grow herbs on a windowsill
write thank-you letters
travel with only a carry-on bag
set up a simple home network
photograph the night sky
prepare for a marathon
keep a sourdough starter alive
learn to identify wild mushrooms safely
build a small bookshelf
teach a teenager to cook
retire in ten years
learn to play table tennis
stay calm before exams
clean a cast-iron pan
start a neighbourhood tool library
learn basic first aid
repot a large plant
learn calligraphy
take up open-water swimming
get organised for tax season
help a shy child make friends
sleep well in a noisy city
plan a vegetable garden rotation
learn to dance salsa
make a long-distance relationship work
choose a charity to support
start a savings habit with a small income
get better at estimating how long tasks take
learn to bake gluten-free bread
survive the first month with a newborn
prepare a house for a heatwave
plan meals for a marathon training block
get into rock climbing
write a eulogy for a grandparent
ask for feedback at work
restore an old wooden chair
sell things I no longer need
""")

CONCEPTS = lines("""
how tides work
why the sky is blue
how vaccines train the immune system
what inflation is
how compound interest grows
why leaves change colour in autumn
how a refrigerator keeps food cold
what a black hole is
how bees make honey
why we have seasons
how a bill becomes law in a parliament
what DNA does
how noise-cancelling headphones work
why bread rises
how credit scores work
what causes earthquakes
how a rainbow forms
how the heart pumps blood
why ice floats
how GPS finds your position
what a carbon footprint is
how a bicycle stays upright
why the moon has phases
how muscles grow after exercise
what an index fund is
how recycling plastic works
how a microwave heats food
why cats purr
how sound travels
what photosynthesis does
how a jet engine works
why we dream
how a solar panel makes electricity
how antibiotics work and why resistance appears
what supply and demand mean
how the internet routes a message
what an ecosystem is
how glaciers move
why onions make you cry
how a lock and key work
what a placebo effect is
how volcanoes form
how a camera lens focuses
why some metals rust
what a recession is
how bats navigate in the dark
why the Roman Empire split in two
how the printing press changed Europe
what the water cycle is
how batteries store energy
what public-key encryption is
how a search engine ranks pages
why the ocean is salty
how caffeine keeps you awake
what a food chain is
how hearing aids work
how elections with ranked choices are counted
why the Dead Sea is so salty
how coral reefs form
what an allergy is
how a thermostat works
how yeast ferments sugar
why birds migrate
how wind turbines generate power
what a mortgage is
how a compass works
why honey never spoils
how the stock market works
how a heat pump heats a house
what a gene mutation is
why mountains have snow on top
how fingerprints form
how a submarine dives and surfaces
what opportunity cost means
how spiders spin webs
why the sea looks blue
how an airplane wing produces lift
what the greenhouse effect is
how a fridge magnet sticks
how our eyes see colour
what a pension is
why bread goes stale
how trains stay on the rails
what the scientific method is
how dolphins sleep
how a canal lock works
why some people are left-handed
what a tax bracket is
how clouds form
how the immune system fights a cold
how a piano makes sound
why the Titanic sank
how trade between countries works
what a calorie is
how octopuses change colour
what a budget deficit is
how a dam generates electricity
why leaves are green
how a 3D printer works
what a time zone is
how an elevator works
why the Great Wall of China was built
how a suspension bridge carries weight
what a sourdough starter is
how sunscreen protects skin
why we yawn
how chess engines choose moves
what interest rates do to house prices
how a QR code stores information
why the Industrial Revolution began in Britain
how soil forms
what a leap year is for
how an electric motor spins
how lightning forms
why some foods are spicy
how a smoke detector works
what metabolism is
how vinyl records store music
how a loan amortisation schedule works
why the Eiffel Tower was built
how hibernation works
what a supply chain is
how a touchscreen senses a finger
how bread yeast and baking powder differ
why rivers meander
how a crossword is constructed
what a nebula is
how a hearing test works
why the Silk Road mattered
how a car's gearbox works
what behavioural economics studies
how ants find food
how a nuclear reactor makes heat
why the Dutch built windmills
how a fountain pen feeds ink
what a carbon tax is
how sleep cycles work
how a pendulum clock keeps time
why penguins live in the south
""")

CHOICES = lines("""
renting|buying a home
an electric car|a hybrid car
a laptop|a desktop computer
learning Spanish|learning Mandarin
a gym membership|working out at home
a cat|a dog
a fixed-rate mortgage|a variable-rate mortgage
public transport|cycling to work
a Kindle|paper books
studying at university|starting an apprenticeship
freelancing|a salaried job
a gas hob|an induction hob
a road bike|a gravel bike
a big wedding|a small wedding
index funds|individual shares
moving to the city|staying in a small town
a standing desk|a regular desk
coffee|tea in the morning
a camping holiday|a hotel holiday
an iPhone|an Android phone
a heat pump|a new gas boiler
a tablet|a laptop for a student
Python|JavaScript as a first language
a master's degree|work experience
a paper planner|a calendar app
hardwood floors|carpet
a used car|a new car
night shifts|day shifts
a dishwasher|washing up by hand
a shared office|working from home
a mechanical keyboard|a laptop keyboard
running outdoors|a treadmill
a family doctor visit|an online consultation
a sourdough loaf|a yeasted loaf
learning piano|learning guitar
an e-bike|a scooter
a smart speaker|no smart devices at home
paying off a loan early|investing the money
a hamster|a goldfish for a child
a train trip|a flight for a 600 km journey
a paper map|a phone map when hiking
a part-time job|volunteering while studying
a vegetable box subscription|a supermarket shop
a savings account|premium bonds
buying a house with a friend|buying alone
homeschooling|a local school
a film camera|a digital camera
open-plan living|separate rooms
a cruise|a city break
an open-source office suite|a paid office suite
a sofa bed|a guest bed
group fitness classes|a personal trainer
a flat with a garden|a flat near the station
composting at home|a council food-waste bin
a pressure cooker|a slow cooker
term life insurance|whole life insurance
a career in teaching|a career in software
early retirement|a later, larger pension
a cast-iron pan|a non-stick pan
""")

SITUATIONS = lines("""
I live alone and work long hours.
We are a family of four on one income.
I'm a student with very little money.
I'm retired and have plenty of time.
I move house every couple of years.
I have a bad knee.
I work from home three days a week.
I care a lot about the environment.
I'm saving for a house.
I get bored easily.
""")

_GOAL_TEMPLATES = {
    "how-do-i": "How do I {g}?",
    "week-plan": "Make me a {n}-week plan to {g}.",
    "beginner-mistakes": "What mistakes do beginners make when they try to {g}?",
    "little-time": "I want to {g}, but I only have {t} a week. Where should I start?",
    "first-steps": "What are the first three steps to {g}?",
    "friend-advice": "My friend {name} wants to {g}. What advice would you give them?",
    "obstacles": "What usually gets in the way when people try to {g}, and how can I avoid it?",
    "checklist": "Give me a checklist to {g}.",
    "budget": "Roughly how much money and time does it take to {g}?",
    "motivation": "I keep giving up when I try to {g}. How can I stick with it this time?",
    "progress": "How will I know I'm making progress if I {g_bare}?",
    "why-bother": "Why would someone want to {g}? Give me honest pros and cons.",
    "daily-habit": "Suggest a small daily habit that would help me {g}.",
    "tried-failed": "I tried to {g} last year and it didn't work out. What could I do differently?",
}
_CONCEPT_TEMPLATES = {
    "explain": "Can you explain {c}?",
    "eli-audience": "Explain {c} to {a}.",
    "misconception": "What is a common misconception about {c}?",
    "analogies": "Give me {n} analogies that help explain {c}.",
    "one-paragraph": "In one paragraph, tell me {c}.",
    "quiz": "Write a short five-question quiz to check someone understands {c}.",
    "history": "Who first worked out {c}, and how did they figure it out?",
    "curious-kid": "My kid asked me {c} and I didn't know what to say. Help!",
    "step-by-step": "Walk me through {c}, step by step.",
    "true-false": "Give me four true-or-false statements about {c}, with the answers.",
    "what-if": "What would change in everyday life if nobody understood {c}?",
    "teach-outline": "Outline a ten-minute lesson on {c}.",
}
_CHOICE_TEMPLATES = {
    "should-i": "Should I choose {x} or {y}? {s}",
    "table": "Make a table comparing {x} and {y} on cost, effort and risk.",
    "pros-cons": "What are the pros and cons of {x} versus {y}?",
    "decide-for-me": "I can't decide between {x} and {y}. Ask me the questions that would settle it.",
    "long-term": "Thinking ten years ahead, is {x} or {y} the better choice? {s}",
    "myths": "What do people get wrong when they compare {x} with {y}?",
    "argue-both": "Argue for {x} in one paragraph, then argue for {y} in another.",
    "hidden-costs": "What hidden costs should I expect with {x} compared with {y}?",
}


def _context(text: str, rng: random.Random) -> str:
    """Some context before the question, as people often give it; makes prompt lengths vary."""
    a, b = rng.sample(SITUATIONS, 2)
    return rng.choice(("Some background: {a} {b} {t}", "{t} For context, {la} {b}", "{a} {b} So: {t}")).format(
        a=a, b=b, t=text, la=a[0].lower() + a[1:])


CHAT_MODIFIERS = GENERAL_MODIFIERS + (_context, _context)


def _goal(key: str, template: str) -> Template:
    def render(goal: str, rng: random.Random) -> str:
        return fill(
            template,
            rng,
            g=goal,
            g_bare=goal,
            n=str(rng.choice((2, 3, 4, 6, 8, 12))),
            t=rng.choice(("an hour", "two hours", "three evenings", "30 minutes", "one weekend morning")),
            name=NAMES,
        )

    return Template(key, render)


def _concept(key: str, template: str) -> Template:
    def render(concept: str, rng: random.Random) -> str:
        return fill(template, rng, c=concept, a=AUDIENCES, n=str(rng.choice((2, 3, 4))))

    return Template(key, render)


def _choice(key: str, template: str) -> Template:
    def render(pair: str, rng: random.Random) -> str:
        x, y = pair.split("|")
        if rng.random() < 0.5:
            x, y = y, x
        return fill(template, rng, x=x, y=y, s=SITUATIONS)

    return Template(key, render)


POOLS = (
    Pool(
        "chat.goal",
        "chat",
        GOALS,
        tuple(_goal(k, t) for k, t in _GOAL_TEMPLATES.items()),
        share=0.4,
        topic_key=lambda g: "goal:" + g,
        modifiers=CHAT_MODIFIERS,
        modifier_rate=0.45,
    ),
    Pool(
        "chat.concept",
        "chat",
        CONCEPTS,
        tuple(_concept(k, t) for k, t in _CONCEPT_TEMPLATES.items()),
        share=0.4,
        topic_key=lambda c: "concept:" + c,
        modifiers=CHAT_MODIFIERS,
        modifier_rate=0.45,
    ),
    Pool(
        "chat.choice",
        "chat",
        CHOICES,
        tuple(_choice(k, t) for k, t in _CHOICE_TEMPLATES.items()),
        share=0.2,
        topic_key=lambda p: "choice:" + p,
        modifiers=CHAT_MODIFIERS,
        modifier_rate=0.3,
    ),
)
