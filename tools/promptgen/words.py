"""Fillers shared by every category: people, places, personas, audiences and the instruction modifiers.

Fillers are not topics: they vary the surface of a prompt and are shared between splits. What a
prompt is *about* lives in the category modules and is split by family.
"""

from __future__ import annotations

import random

from homespec.longprompts.material import Fillers
from tools.promptgen.design import lines

NAMES = lines("""
Amara
Bogdan
Chiara
Dmitri
Esi
Farid
Greta
Hiroshi
Ines
Jonas
Kavya
Lars
Mei
Nikolai
Olusegun
Priya
Quentin
Rosa
Santiago
Tamsin
Umar
Valentina
Wen
Ximena
Yusuf
Zofia
Aiko
Bruno
Carmen
Dev
Elif
Finn
Gabriela
Hamid
Ingrid
Jae-won
Kofi
Leila
Mateo
Nadia
Oren
Paulina
Rahul
Sione
Tomasz
Uma
Viktor
Wanjiru
Yara
Zane
Astrid
Bilal
Cosmin
Daria
Emeka
Fatima
Gideon
Hana
Ilya
Jasmine
Kenji
Lucia
Marek
Noor
Oskar
Pilar
Rafael
Saanvi
Teodor
Ulla
Vera
Wiremu
Xavier
Yasmin
Zeynep
Anouk
Basil
Camille
Diego
Eamon
Freya
Goran
Helga
Isabel
Javier
Kaito
Lina
Moana
Nils
Odette
Pedro
Rania
Sven
Thandiwe
Ugo
Vikram
Wilma
Ayesha
Ruairi
Soraya
Tariq
Malia
Joaquim
Svetlana
""")

TOWNS = lines("""
Harrowfield
Port Esker
Millbrook Vale
Kestrel Bay
Ashcombe
Lindenmoor
Redwater Crossing
Saltmarsh
Oakhaven
Brightwell
Corran Ferry
Elmstead
Grayfen
Highmere
Juniper Flats
Larkspur
Northam Quay
Pennock
Quarry Hill
Rookwood
Stonebridge
Thornbury Cross
Upperby
Westerlea
Yarrow Point
""")

# the fillers every renderer draws people and places from (homespec.longprompts.render)
FILLERS = Fillers(NAMES, TOWNS)

PERSONAS = lines("""
a patient primary-school teacher
a blunt but kind football coach
a retired ship's engineer who loves analogies
a cheerful librarian
a careful pharmacist
a stand-up comedian who still gets the facts right
a product manager who thinks in trade-offs
a calm emergency-room nurse
a park ranger
a senior software engineer mentoring a new hire
a personal-finance columnist
a museum tour guide
a strict but fair editor
a friendly neighbour who fixes everything
a sports physiotherapist
a chess coach
a science journalist
a kindergarten teacher
a chef running a busy kitchen
a travel writer
""")

AUDIENCES = lines("""
a ten-year-old
a curious teenager
a busy parent
a first-year university student
someone who has never studied science
a retired accountant
a non-native English speaker
a small-business owner
a nurse on a night shift
a complete beginner
an expert who wants only the key points
a sceptical friend
""")

TONES = lines("""
warm
formal
playful
matter-of-fact
encouraging
dry and witty
gentle
enthusiastic
calm and reassuring
concise and professional
""")

LANGUAGES_HUMAN = lines("""
French
Spanish
German
Italian
Portuguese
Dutch
Swedish
Polish
Turkish
Indonesian
""")


def _word_limit(text: str, rng: random.Random) -> str:
    return f"{text} Keep it under {rng.choice((40, 60, 80, 100, 150, 200, 250))} words."


def _format(text: str, rng: random.Random) -> str:
    return text + " " + rng.choice(
        (
            "Use bullet points.",
            "Answer as a short numbered list.",
            "Start with a one-sentence summary, then give the details.",
            "Put the most important point first.",
            "Finish with one practical tip.",
            "Use a markdown table where it helps.",
            "Give the answer in two short paragraphs.",
            "Use headings for each part.",
            "Answer in exactly three sentences.",
            "Include one concrete example.",
            "Avoid jargon.",
            "Be honest about what is uncertain.",
        )
    )


def _persona(text: str, rng: random.Random) -> str:
    return rng.choice(("You are {p}. ", "Answer as {p} would. ", "Pretend you are {p}. ")).format(
        p=rng.choice(PERSONAS)
    ) + text


def _audience(text: str, rng: random.Random) -> str:
    return f"{text} Explain it so that {rng.choice(AUDIENCES)} could follow."


def _tone(text: str, rng: random.Random) -> str:
    return f"{text} Keep the tone {rng.choice(TONES)}."


GENERAL_MODIFIERS = (_word_limit, _format, _persona, _audience, _tone)
LIGHT_MODIFIERS = (_word_limit, _format, _tone)
