"""Rewriting and translation-style tasks: change register, length, voice or language of a given text."""

from __future__ import annotations

import random
import re

from tools.promptgen.design import Pool, Template, fill, lines
from tools.promptgen.passages import SUBJECTS, Subject, passage
from tools.promptgen.words import AUDIENCES, LANGUAGES_HUMAN, TONES

MESSAGES = lines("""
hey can u send me the report by fri, the boss keeps asking and i said it would be done already
The meeting has been moved to Thursday at 3 because half the team is off on Wednesday.
sorry i missed ur call, was stuck on the train with no signal for like an hour
Please note that the kitchen will be closed for cleaning from Monday until further notice.
We regret to inform you that your application was not successful on this occasion.
the wifi is down again, has anyone tried turning the router off and on
Our shop will open late tomorrow because of the delivery, we should be open by 11.
I think we should maybe consider possibly looking into whether the budget could perhaps be increased.
Lost: grey cat, answers to Pickle, last seen near the bakery on Elm Street. Very friendly.
Can everyone please stop leaving dirty mugs in the sink, it's getting ridiculous.
The new bus timetable starts on the first of next month and some early services are cut.
thanks so much for dinner last night, the lasagne was amazing and the kids loved it
Due to unforeseen circumstances the concert has been postponed to a date to be confirmed.
Just a reminder that rent is due on the 1st and late payments get a fee.
I've attached the photos from the trip, the one with the goat is my favourite.
Your parcel could not be delivered because nobody was home. Please rebook a delivery.
The printer on the second floor is broken, use the one by the stairs until it's fixed.
guys the match is cancelled cos the pitch is flooded, training thursday instead
We are delighted to announce that the library will now open on Sundays.
Please remember to water the tomatoes every evening while I'm away, they dry out fast.
Your subscription will renew automatically on 3 March unless you cancel before then.
The results are in and our team came third out of twenty, which is our best ever.
if ur coming to the party bring a chair, we dont have enough
Water will be off between 9 and 12 on Tuesday while the pipes are replaced.
I really appreciate you stepping in at short notice, it made a huge difference.
The survey shows that most people want more benches and fewer parking spaces in the square.
Management has decided that, effective immediately, all expense claims require two signatures.
Running late, traffic is awful, start without me and I'll catch up.
The recipe says to let the dough rest for an hour but I never do and it's fine.
Visitors must sign in at reception and wear their badge at all times.
omg the new café on the corner does the best cinnamon buns, we have to go
It is with great sadness that we announce the closure of our Harbour Street branch.
Please could you let me know whether the flat is still available to view this weekend?
The heating in the classroom doesn't work and the children are wearing coats indoors.
Congratulations on passing your driving test, I knew you'd do it!
The software update fixes several bugs and makes the app start faster.
Our dog barks at the postman every day and we don't know how to stop it.
Tickets are non-refundable but can be transferred to another person up to 24 hours before the show.
the report looks ok but the numbers in section 2 dont match the table at the end
We kindly ask all residents to keep the corridors clear of bicycles and pushchairs.
""")

_SWAPS = ((r"\btheir\b", "there"), (r"\byou're\b", "your"), (r"\bit's\b", "its"), (r"\bthan\b", "then"),
          (r"\bdoesn't\b", "dont"), (r"\bI\b", "i"), (r"\bwe're\b", "were"), (r"\bto\b", "too"))


def add_errors(text: str, rng: random.Random) -> str:
    """Introduce a few typical mistakes so a 'correct the grammar' prompt has something to correct."""
    out = text
    for pattern, replacement in rng.sample(_SWAPS, k=4):
        out = re.sub(pattern, replacement, out, count=1)
    words = out.split(" ")
    if len(words) > 6:
        i = rng.randrange(1, len(words) - 1)
        words.insert(i, words[i])  # a doubled word
    return " ".join(words).replace(". ", ", ", 1)


_REWRITE = {
    "formal": "Rewrite this in a formal register:\n\n{text}",
    "casual": "Make this sound casual and friendly:\n\n{text}",
    "simpler": "Rewrite this so that {audience} can understand it:\n\n{text}",
    "shorter": "Shorten this to about half its length without losing the key information:\n\n{text}",
    "bullets": "Turn this into a short list of bullet points:\n\n{text}",
    "grammar": "Correct the spelling and grammar. Change nothing else.\n\n{broken}",
    "translate": "Translate this into {language}:\n\n{text}",
    "translate-back": "Translate this into {language}, then back into English, and point out anything that changed.\n\n{text}",
    "tone": "Rewrite this with a {tone} tone:\n\n{text}",
    "positive": "Rewrite this so it sounds more positive but stays honest:\n\n{text}",
    "pirate": "Rewrite this as a pirate would say it:\n\n{text}",
    "old-fashioned": "Rewrite this in the style of a Victorian letter:\n\n{text}",
    "headline": "Turn this into a punchy headline and a one-line subheading:\n\n{text}",
    "active-voice": "Rewrite this using the active voice wherever possible:\n\n{text}",
    "expand": "Expand this into a fuller paragraph, adding polite context but no new facts:\n\n{text}",
    "third-person": "Rewrite this in the third person:\n\n{text}",
    "plain-english": "Rewrite this in plain English and explain what changed:\n\n{text}",
    "tweet": "Rewrite this as a post of at most 280 characters:\n\n{text}",
}


def _rewrite(key: str, template: str, source) -> Template:
    def render(topic, rng: random.Random) -> str:
        text = source(topic, rng)
        return fill(template, rng, text=text, broken=add_errors(text, rng), audience=AUDIENCES,
                    language=LANGUAGES_HUMAN, tone=TONES)

    return Template(key, render)


def _message_text(message: str, rng: random.Random) -> str:
    return message


def _passage_text(subject: Subject, rng: random.Random) -> str:
    return passage(subject, rng, n_sentences=rng.randint(2, 5))[1]


POOLS = (
    Pool("rewrite.message", "rewrite", MESSAGES, tuple(_rewrite(k, t, _message_text) for k, t in _REWRITE.items()),
         share=0.55, topic_key=lambda m: "message:" + m, family="rewrite"),
    Pool("rewrite.passage", "rewrite", SUBJECTS, tuple(_rewrite(k, t, _passage_text) for k, t in _REWRITE.items()),
         share=0.45, topic_key=lambda s: s.key, family="rewrite"),
)
