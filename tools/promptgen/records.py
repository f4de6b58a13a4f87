"""Invented tabular records (orders, flights, sensor readings, ...) and their renderings as prose,
CSV, markdown tables, key-value blocks and log lines, for extraction and transformation prompts."""

from __future__ import annotations

import random

from homespec.longprompts.material import Field, RecordKind
from homespec.longprompts.render import as_csv, as_markdown
from homespec.longprompts.render import draw_records as _draw
from tools.promptgen.design import lines
from tools.promptgen.words import FILLERS

__all__ = ["FORMATS", "FORMAT_NAMES", "RECORD_KINDS", "RecordKind", "as_csv", "as_markdown", "draw_records", "render"]


def _kind(line: str) -> RecordKind:
    key, noun, *specs = (s.strip() for s in line.split(";"))
    fields = []
    for spec in specs:
        name, kind, *args = spec.split(":")
        fields.append(Field(name, kind, tuple(args[0].split("/")) if kind == "choice" else tuple(args)))
    return RecordKind(key, noun, tuple(fields))


RECORD_KINDS = tuple(
    _kind(line)
    for line in lines("""
employees; an employee; name:person; department:choice:Sales/Support/Finance/Design/Warehouse; age:int:21:64; start_date:date
book-loans; a library loan; borrower:person; title:choice:The Glass Orchard/Salt and Iron/A Map of Small Rivers/The Quiet Engine/Winter Letters; due:date; fine_eur:money:0:12
orders; an order; order_id:code:ORD-####; customer:person; item:choice:kettle/desk lamp/backpack/yoga mat/headphones/blender; quantity:int:1:6; total_eur:money:8:420
flights; a flight; flight:code:HS###; from:town; to:town; departs:time; gate:code:G##; status:choice:on time/delayed/boarding/cancelled
sensor-readings; a sensor reading; sensor:code:T-##; room:choice:kitchen/attic/cellar/server room/greenhouse; celsius:int:-5:41; humidity_pct:int:20:95; time:time
match-results; a match result; home:town; away:town; home_goals:int:0:6; away_goals:int:0:6; date:date
rentals; a holiday rental; listing:code:R-###; town:town; bedrooms:int:1:5; nightly_eur:money:45:390; rating:int:1:5
appointments; an appointment; patient:person; clinic:choice:dental/physio/eye test/vaccination/hearing; date:date; time:time
used-cars; a used car; make:choice:Fiat/Toyota/Skoda/Volvo/Kia/Renault; year:int:2005:2023; mileage_km:int:5000:240000; price_eur:money:1500:26000
concerts; a concert; band:choice:The Paper Lanterns/Harbour Static/Velvet Owls/North Quarter/Little Engines; venue:town; date:date; tickets_sold:int:40:5000
courses; a course; course:choice:Pottery/Spanish/First Aid/Woodwork/Python/Watercolour; teacher:person; weeks:int:4:16; fee_eur:money:30:480; places_left:int:0:20
plants; a plant order; plant:choice:fern/olive tree/lavender/basil/monstera/rosemary; pot_cm:int:9:40; quantity:int:1:12; price_eur:money:3:85
hikes; a logged hike; hiker:person; trail:choice:Ridge Loop/Old Quarry Path/Coast Walk/Beacon Climb/River Trail; km:int:3:32; ascent_m:int:50:1400; date:date
invoices; an invoice; invoice:code:INV-####; client:person; amount_eur:money:40:9000; due:date; paid:choice:yes/no
job-posts; a job posting; role:choice:bike mechanic/data analyst/chef/nurse/electrician/teacher; town:town; salary_k_eur:int:22:85; remote:choice:yes/no/hybrid
parcels; a parcel; tracking:code:PK########; sender:person; weight_kg:int:1:30; destination:town; status:choice:sorted/in transit/out for delivery/delivered
hotel-bookings; a hotel booking; guest:person; nights:int:1:14; room:choice:single/double/twin/suite; check_in:date; total_eur:money:60:2600
repair-tickets; a repair ticket; ticket:code:TCK-###; reporter:person; device:choice:printer/laptop/router/phone/projector; priority:choice:low/medium/high/urgent; opened:date
volunteers; a volunteer shift; volunteer:person; task:choice:sorting donations/driving/serving food/reception/gardening; hours:int:1:8; date:date
weather-stations; a daily weather record; station:town; date:date; max_c:int:-8:38; min_c:int:-15:24; rain_mm:int:0:60
exam-results; an exam result; student:person; subject:choice:maths/history/biology/French/music/art; score:int:12:100; grade:choice:A/B/C/D/E
energy-bills; a monthly energy bill; month:choice:January/February/March/April/May/June/July/August; kwh:int:90:900; cost_eur:money:25:380; tariff:choice:fixed/variable
""")
)


def draw_records(kind: RecordKind, rng: random.Random, n: int) -> list[dict[str, str]]:
    return _draw(kind, rng, n, FILLERS)


def as_prose(kind: RecordKind, rows: list[dict[str, str]], rng: random.Random) -> str:
    """Each record as a sentence with its fields in a shuffled order, so extraction needs reading."""
    sentences = []
    for r in rows:
        names = [f.name for f in kind.fields]
        first, rest = names[0], names[1:]
        rng.shuffle(rest)
        parts = [f"the {n.replace('_', ' ')} is {r[n]}" for n in rest]
        joined = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
        sentences.append(f"For {kind.noun} with {first.replace('_', ' ')} {r[first]}, {joined}.")
    return " ".join(sentences)


def as_log(kind: RecordKind, rows: list[dict[str, str]]) -> str:
    return "\n".join(" ".join(f"{k}={v.replace(' ', '_')}" for k, v in r.items()) for r in rows)


def as_blocks(kind: RecordKind, rows: list[dict[str, str]]) -> str:
    return "\n\n".join("\n".join(f"{k}: {v}" for k, v in r.items()) for r in rows)


FORMATS = ("csv", "markdown", "prose", "log", "blocks")
FORMAT_NAMES = {"csv": "CSV", "markdown": "markdown table", "prose": "text", "log": "log", "blocks": "list"}


def render(kind: RecordKind, rows: list[dict[str, str]], fmt: str, rng: random.Random) -> str:
    if fmt == "csv":
        return as_csv(kind, rows)
    if fmt == "markdown":
        return as_markdown(kind, rows)
    if fmt == "prose":
        return as_prose(kind, rows, rng)
    if fmt == "log":
        return as_log(kind, rows)
    return as_blocks(kind, rows)

