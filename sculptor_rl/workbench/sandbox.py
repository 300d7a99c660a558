"""A WorkBench-style sandbox (Styles et al., 2024): in-memory workplace databases and the 27 tools over them.

Five databases (calendar, email, customer relationship manager, analytics, project management) and a company
directory, generated deterministically from a seed, at WorkBench's fixed "now": Thursday 2023-11-30 00:00:00.
The tools keep WorkBench's names (`calendar.create_event`, ...) and parameters (all strings; a number given for
a string parameter is taken as its decimal text). Every bad call (unknown tool, unknown or missing argument,
bad format, unknown id) raises `WorkbenchError` with a message for the model, and changes nothing.

A task's outcome is checked as WorkBench does: the final database state (`Sandbox.state()`) must equal the state
the gold calls reach from the same start (`outcome_correct`); reads change nothing, so only the writes count.
"""

from __future__ import annotations

import copy
import json
import csv
import random
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path

from ..toolcalls import json_object

__all__ = ["NOW", "PEOPLE", "TOOLS", "WorkbenchError", "Sandbox", "database", "load_database", "outcome_correct",
           "parsed_arguments", "replay", "start_database", "tool_schemas"]

NOW = datetime(2023, 11, 30, 0, 0, 0)  # WorkBench's "today": Thursday, 2023-11-30 00:00:00
ME = "me@atlas.com"
PEOPLE = ["Carlos Rodriguez", "Nadia Moreau", "Yuki Tanaka", "Raj Patel", "Sofia Santos", "Akira Sato",
          "Lena Fischer", "Dmitri Ivanov", "Fatima Khan", "Chenwei Zhang", "Santiago Martinez", "Amir Ibrahim"]
CUSTOMERS = ["Dakota Wilson", "Cameron Anderson", "Quinn Thomas", "Jordan Lee", "Morgan Hayes", "Riley Brooks",
             "Avery Clark", "Taylor Reed", "Casey Morgan", "Jamie Foster", "Drew Collins", "Skyler Price"]
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
SOURCES = ("direct", "referral", "search engine", "social media")
PLOT_VALUES = ("total_visits", "session_duration_seconds", "engaged_users", "traffic_source")
PLOT_TYPES = ("bar", "line", "scatter", "histogram")
TOPICS = ["Quarterly Tech Roundup", "Homepage Alignment", "UX Feedback Submission", "Supply Chain Workshop",
          "Budget Review", "Hiring Plan", "Security Audit", "Product Launch", "Client Onboarding", "Team Offsite"]
TASK_NAMES = ["Fix login bug", "Design landing page", "Update API docs", "Refactor payment service",
              "Write onboarding guide", "Migrate database", "Create style guide", "Improve search latency",
              "Add dark mode", "Set up monitoring", "Review pull requests", "Plan sprint demo"]
CUSTOMER_FIELDS = ("customer_name", "customer_email", "customer_phone", "last_contact_date", "product_interest",
                   "status", "assigned_to_email", "notes", "follow_up_by")
RESULT_LIMIT = 5  # searches return at most this many rows, as WorkBench's


class WorkbenchError(Exception):
    """A bad tool call: the message tells the model what to fix; the databases are unchanged."""


def email_of(name: str) -> str:
    return f"{name.split()[0].lower()}.{name.split()[-1].lower()}@atlas.com"


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


@lru_cache(maxsize=4)
def _database(seed: int) -> str:
    rng = random.Random(f"workbench-db-{seed}")
    people = [email_of(p) for p in PEOPLE]
    events, emails, customers, tasks, visits = [], [], [], [], []
    day0 = NOW - timedelta(days=10)
    for i in range(24):  # meetings from 10 days ago to 13 days ahead, 9:00-17:00 starts, on weekdays
        day = day0 + timedelta(days=i)
        if day.weekday() >= 5:
            continue
        for _ in range(rng.randint(1, 2)):
            start = day + timedelta(hours=rng.randint(9, 16))
            if any(e["event_start"] == _fmt(start) for e in events):
                continue
            events.append({"event_name": rng.choice(TOPICS), "participant_email": rng.choice(people),
                           "event_start": _fmt(start), "duration": rng.choice(["30", "60"])})
    events.sort(key=lambda e: e["event_start"])
    for i, e in enumerate(events):
        e["event_id"] = f"{i:08d}"
    for i in range(30):
        sender = rng.choice(people)
        sent = NOW - timedelta(days=rng.randint(1, 40), hours=rng.randint(0, 12), minutes=rng.randint(0, 59))
        topic = rng.choice(TOPICS)
        emails.append({"sender": sender, "recipient": ME, "subject": f"Update on {topic}", "sent_datetime": _fmt(sent),
                       "body": f"Hi, here is the latest on {topic.lower()}. Let me know what you think."})
    emails.sort(key=lambda e: e["sent_datetime"])
    for i, e in enumerate(emails):
        e["email_id"] = f"{i:08d}"
    for i, name in enumerate(CUSTOMERS):
        last = NOW.date() - timedelta(days=rng.randint(1, 40))
        customers.append({"customer_id": f"{i:08d}", "customer_name": name, "customer_email": email_of(name).replace(
            "atlas", "example"), "customer_phone": f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
            "last_contact_date": str(last), "product_interest": rng.choice(PRODUCTS), "status": rng.choice(STATUSES),
            "assigned_to_email": rng.choice(people), "notes": "", "follow_up_by": str(last + timedelta(days=14))})
    for i, name in enumerate(TASK_NAMES):
        tasks.append({"task_id": f"{i:08d}", "task_name": name, "assigned_to_email": rng.choice(people),
                      "list_name": rng.choice(LISTS), "due_date": str(NOW.date() + timedelta(days=rng.randint(-5, 30))),
                      "board": rng.choice(BOARDS)})
    for d in range(60):  # 2023-10-01 .. 2023-11-29
        day = date(2023, 10, 1) + timedelta(days=d)
        for _ in range(rng.randint(0, 6)):
            visits.append({"visitor_id": f"{len(visits):04d}", "date_of_visit": str(day),
                           "page_views": str(rng.randint(1, 12)),
                           "session_duration_seconds": str(rng.randint(5, 600)),
                           "traffic_source": rng.choice(SOURCES), "user_engaged": rng.choice(["True", "False"])})
    return json.dumps({"calendar": events, "email": emails, "customer_relationship_manager": customers,
                       "project_management": tasks, "analytics": visits, "plots": [],
                       "company_directory": [{"name": p, "email_address": email_of(p)} for p in PEOPLE]})


def database(seed: int = 0) -> dict:
    """A fresh copy of the databases generated from `seed` (WorkBench has one fixed database: seed 0)."""
    return json.loads(_database(seed))


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [dict(r) for r in csv.DictReader(f)]


def _minutes(start: str, end: str) -> str:
    fmt = "%Y-%m-%d %H:%M:%S"
    return str(int((datetime.strptime(end, fmt) - datetime.strptime(start, fmt)).total_seconds() // 60))


@lru_cache(maxsize=2)
def _load(folder: str) -> str:
    root = Path(folder)
    events = [{"event_id": r["event_id"], "event_name": r["event_name"], "participant_email": r["participant_email"],
               "event_start": r["event_start"],
               "duration": r.get("duration") or _minutes(r["event_start"], r["event_end"])}
              for r in _rows(root / "calendar_events.csv")]
    emails = []
    for r in _rows(root / "emails.csv"):
        other, inbox = r.get("sender/recipient") or r.get("sender", ""), r.get("inbox/outbox", "inbox") == "inbox"
        emails.append({"email_id": r["email_id"], "sender": other if inbox else ME, "recipient": ME if inbox else other,
                       "subject": r["subject"], "sent_datetime": r["sent_datetime"], "body": r["body"]})
    directory = [{"name": " ".join(p.capitalize() for p in r["email_address"].split("@")[0].split(".")),
                  "email_address": r["email_address"]}
                 for r in _rows(root / "email_addresses.csv") or _rows(root.parent / "raw" / "email_addresses.csv")]
    return json.dumps({"calendar": events, "email": emails,
                       "customer_relationship_manager": _rows(root / "customer_relationship_manager_data.csv"),
                       "project_management": _rows(root / "project_tasks.csv"),
                       "analytics": _rows(root / "analytics_data.csv"), "plots": [], "company_directory": directory})


def load_database(folder: str | Path) -> dict:
    """WorkBench's databases (its `data/processed` CSVs) in the sandbox's layout; a missing file is an empty
    table. A fresh copy each call."""
    if not Path(folder).is_dir():
        raise ValueError(f"WorkBench database folder {folder} does not exist")
    return json.loads(_load(str(Path(folder).resolve())))


def start_database(meta: dict) -> dict:
    """The databases a record's episode starts from: WorkBench's own (`meta.database`, an imported record's) or
    the generated ones (`meta.database_seed`, default 0)."""
    return load_database(meta["database"]) if meta.get("database") else database(meta.get("database_seed", 0))


# ---- argument checks ----

_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]+$")


def _datetime(name: str, value: str) -> str:
    if not _DATETIME.match(value):
        raise WorkbenchError(f'{name} must be "YYYY-MM-DD HH:MM:SS", got {value!r}.')
    try:
        datetime.strptime(value, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise WorkbenchError(f"{name} is not a real date and time: {value!r}.") from None
    return value


def _date(name: str, value: str) -> str:
    if not _DATE.match(value):
        raise WorkbenchError(f'{name} must be "YYYY-MM-DD", got {value!r}.')
    try:
        date.fromisoformat(value)
    except ValueError:
        raise WorkbenchError(f"{name} is not a real date: {value!r}.") from None
    return value


def _email(name: str, value: str) -> str:
    if not _EMAIL.match(value):
        raise WorkbenchError(f"{name} must be an email address, got {value!r}.")
    return value.lower()


def _one_of(name: str, value: str, allowed) -> str:
    if value not in allowed:
        raise WorkbenchError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}.")
    return value


@dataclass(frozen=True)
class Tool:
    name: str  # "domain.function"
    description: str
    params: dict  # parameter -> description
    required: tuple


def _tool(tool_name, description, required=(), /, **params) -> Tool:
    return Tool(tool_name, description, params, tuple(required))


TOOLS = {t.name: t for t in (
    _tool("company_directory.find_email_address", "Find the email addresses of colleagues whose name contains "
          "`name` (case-insensitive).", ["name"], name="Name or part of a name of the colleague."),
    _tool("calendar.get_event_information_by_id", "One field of an event.", ["event_id", "field"],
          event_id="8-digit ID of the event.",
          field='One of "event_id", "event_name", "participant_email", "event_start", "duration".'),
    _tool("calendar.search_events", f"Events whose name or participant email contains `query` (case-insensitive), "
          f"optionally in a time range; at most {RESULT_LIMIT}, earliest first.",
          query="Text to find in the event name or participant email.",
          time_min='Lower bound of the event start, "YYYY-MM-DD HH:MM:SS".',
          time_max='Upper bound of the event start, "YYYY-MM-DD HH:MM:SS".'),
    _tool("calendar.create_event", "Create an event; returns its ID.",
          ["event_name", "participant_email", "event_start", "duration"], event_name="Name of the event.",
          participant_email="Email address of the participant.", event_start='Start, "YYYY-MM-DD HH:MM:SS".',
          duration="Duration in minutes, e.g. \"30\"."),
    _tool("calendar.delete_event", "Delete an event.", ["event_id"], event_id="8-digit ID of the event."),
    _tool("calendar.update_event", "Set one field of an event.", ["event_id", "field", "new_value"],
          event_id="8-digit ID of the event.",
          field='One of "event_name", "participant_email", "event_start", "duration".', new_value="The new value."),
    _tool("email.get_email_information_by_id", "One field of an email.", ["email_id", "field"],
          email_id="8-digit ID of the email.",
          field='One of "email_id", "sender", "recipient", "subject", "sent_datetime", "body".'),
    _tool("email.search_emails", f"Emails whose sender, subject or body contains `query` (case-insensitive), "
          f"optionally sent in a date range; at most {RESULT_LIMIT}, newest first.",
          query="Text to find in the sender, subject or body.", date_min='Earliest send date, "YYYY-MM-DD".',
          date_max='Latest send date, "YYYY-MM-DD".'),
    _tool("email.send_email", "Send an email.", ["recipient", "subject", "body"],
          recipient="Email address of the recipient.", subject="Subject line.", body="Text of the email."),
    _tool("email.delete_email", "Delete an email.", ["email_id"], email_id="8-digit ID of the email."),
    _tool("email.forward_email", "Forward an email.", ["email_id", "recipient"], email_id="8-digit ID of the email.",
          recipient="Email address to forward it to."),
    _tool("email.reply_email", "Reply to the sender of an email.", ["email_id", "body"],
          email_id="8-digit ID of the email.", body="Text of the reply."),
    _tool("analytics.get_visitor_information_by_id", "A website visit's data.", ["visitor_id"],
          visitor_id="4-digit ID of the visitor."),
    _tool("analytics.create_plot", "Plot a daily value over a date range; returns the plot's file path.",
          ["time_min", "time_max", "value_to_plot", "plot_type"], time_min='Start date, "YYYY-MM-DD".',
          time_max='End date, "YYYY-MM-DD".', value_to_plot=f"One of {', '.join(PLOT_VALUES)}.",
          plot_type=f"One of {', '.join(PLOT_TYPES)}."),
    _tool("analytics.total_visits_count", "Visits per day in a date range.", time_min='Start date, "YYYY-MM-DD".',
          time_max='End date, "YYYY-MM-DD".'),
    _tool("analytics.engaged_users_count", "Engaged users per day in a date range.",
          time_min='Start date, "YYYY-MM-DD".', time_max='End date, "YYYY-MM-DD".'),
    _tool("analytics.traffic_source_count", "Visits per day from one traffic source in a date range.",
          ["traffic_source"], time_min='Start date, "YYYY-MM-DD".', time_max='End date, "YYYY-MM-DD".',
          traffic_source=f"One of {', '.join(SOURCES)}."),
    _tool("analytics.get_average_session_duration", "Average session duration in seconds per day in a date range.",
          time_min='Start date, "YYYY-MM-DD".', time_max='End date, "YYYY-MM-DD".'),
    _tool("project_management.get_task_information_by_id", "One field of a task.", ["task_id", "field"],
          task_id="8-digit ID of the task.",
          field='One of "task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board".'),
    _tool("project_management.search_tasks", f"Tasks matching every given field (names: contains, "
          f"case-insensitive); at most {RESULT_LIMIT}.", task_name="Text in the task name.",
          assigned_to_email="Email of the assignee.", list_name=f"One of {', '.join(LISTS)}.",
          due_date='"YYYY-MM-DD".', board=f"One of {', '.join(BOARDS)}."),
    _tool("project_management.create_task", "Create a task; returns its ID.",
          ["task_name", "assigned_to_email", "list_name", "due_date", "board"], task_name="Name of the task.",
          assigned_to_email="Email of the assignee.", list_name=f"One of {', '.join(LISTS)}.",
          due_date='"YYYY-MM-DD".', board=f"One of {', '.join(BOARDS)}."),
    _tool("project_management.delete_task", "Delete a task.", ["task_id"], task_id="8-digit ID of the task."),
    _tool("project_management.update_task", "Set one field of a task.", ["task_id", "field", "new_value"],
          task_id="8-digit ID of the task.",
          field='One of "task_name", "assigned_to_email", "list_name", "due_date", "board".', new_value="New value."),
    _tool("customer_relationship_manager.search_customers", f"Customers matching every given field (names: "
          f"contains, case-insensitive); at least one field; at most {RESULT_LIMIT}.",
          customer_name="Text in the customer's name.", customer_email="Customer's email.",
          product_interest=f"One of {', '.join(PRODUCTS)}.", status=f"One of {', '.join(STATUSES)}.",
          assigned_to_email="Email of the colleague assigned.",
          last_contact_date_min='"YYYY-MM-DD".', last_contact_date_max='"YYYY-MM-DD".'),
    _tool("customer_relationship_manager.update_customer", "Set one field of a customer.",
          ["customer_id", "field", "new_value"], customer_id="8-digit ID of the customer.",
          field='One of "customer_name", "customer_email", "customer_phone", "last_contact_date", '
                '"product_interest", "status", "assigned_to_email", "notes", "follow_up_by".',
          new_value="New value."),
    _tool("customer_relationship_manager.add_customer", "Add a customer; returns its ID.",
          ["customer_name", "assigned_to_email", "status"], customer_name="Name.",
          assigned_to_email="Email of the colleague assigned.", status=f"One of {', '.join(STATUSES)}.",
          customer_email="Customer's email.", customer_phone="Phone number.",
          last_contact_date='"YYYY-MM-DD".', product_interest=f"One of {', '.join(PRODUCTS)}.", notes="Notes.",
          follow_up_by='"YYYY-MM-DD".'),
    _tool("customer_relationship_manager.delete_customer", "Delete a customer.", ["customer_id"],
          customer_id="8-digit ID of the customer."),
)}
DOMAINS = ("analytics", "calendar", "customer_relationship_manager", "email", "project_management")


def tool_schemas(names=None) -> list[dict]:
    """OpenAI-style schemas of the tools (all, or `names` in that order)."""
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description,
        "parameters": {"type": "object", "properties": {p: {"type": "string", "description": d}
                                                         for p, d in t.params.items()},
                       "required": list(t.required)}}} for t in (TOOLS[n] for n in (names or TOOLS))]


def _arguments(tool: Tool, arguments) -> dict:
    try:
        arguments = json_object(arguments)
    except ValueError as e:
        raise WorkbenchError(str(e)) from None
    out = {}
    for key, value in arguments.items():
        if key not in tool.params:
            raise WorkbenchError(f"{tool.name} has no argument {key!r}; it takes {', '.join(tool.params)}.")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if value is None:
            continue
        if not isinstance(value, str):
            raise WorkbenchError(f"argument {key!r} must be a string, got a {type(value).__name__}.")
        if value.strip():
            out[key] = value.strip()
    missing = [p for p in tool.required if p not in out]
    if missing:
        raise WorkbenchError(f"{tool.name} needs {', '.join(missing)} (missing or empty).")
    return out


def _row(table: list[dict], key: str, value: str, what: str) -> dict:
    for row in table:
        if row[key] == value:
            return row
    raise WorkbenchError(f"{what} {value!r} not found.")


def _next_id(table: list[dict], key: str, width: int = 8) -> str:
    return f"{max((int(r[key]) for r in table), default=-1) + 1:0{width}d}"


def _contains(text: str, query: str) -> bool:
    return query.lower() in text.lower()


class Sandbox:
    """The databases of one episode and the tools over them (`call`)."""

    def __init__(self, db: dict | None = None, seed: int = 0):
        self.db = copy.deepcopy(db) if db is not None else database(seed)

    def state(self) -> dict:
        """A copy of the whole state, for the outcome check (rows in a canonical order)."""
        return {name: sorted((dict(r) for r in rows), key=lambda r: json.dumps(r, sort_keys=True))
                for name, rows in self.db.items()}

    def call(self, name: str, arguments) -> str:
        """Run one tool; its result as text. WorkbenchError (nothing changed) on a bad call."""
        if name not in TOOLS:
            raise WorkbenchError(f"unknown tool {name!r}; the tools are named like calendar.create_event.")
        args = _arguments(TOOLS[name], arguments)
        result = getattr(self, name.replace(".", "__"))(**args)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    # ---- rows: every write checks its values first, so a bad call changes nothing ----

    def _add(self, table, key, row):
        row[key] = _next_id(self.db[table], key)
        self.db[table].append(row)
        return row[key]

    def _delete(self, table, key, id_, what):
        self.db[table].remove(_row(self.db[table], key, id_, what))
        return f"{what} deleted successfully."

    def _update(self, table, key, id_, what, field, value):
        _row(self.db[table], key, id_, what)[field] = value
        return f"{what} updated successfully."

    # ---- company directory ----

    def company_directory__find_email_address(self, name):
        found = [p["email_address"] for p in self.db["company_directory"] if _contains(p["name"], name)]
        if not found:
            raise WorkbenchError(f"no colleague's name contains {name!r}.")
        return found

    # ---- calendar ----

    def _field(self, table, key, id_, field, what):
        row = _row(self.db[table], key, id_, what)
        if field not in row:
            raise WorkbenchError(f"{what.lower()}s have no field {field!r}; fields: {', '.join(row)}.")
        return {field: row[field]}

    def calendar__get_event_information_by_id(self, event_id, field):
        return self._field("calendar", "event_id", event_id, field, "Event")

    def calendar__search_events(self, query="", time_min=None, time_max=None):
        lo = _datetime("time_min", time_min) if time_min else None
        hi = _datetime("time_max", time_max) if time_max else None
        found = [e for e in self.db["calendar"] if (_contains(e["event_name"], query)
                 or _contains(e["participant_email"], query)) and (not lo or e["event_start"] >= lo)
                 and (not hi or e["event_start"] <= hi)]
        return sorted(found, key=lambda e: e["event_start"])[:RESULT_LIMIT] or "No events found."

    def _event_field(self, field, value):
        checks = {"event_name": lambda v: v, "participant_email": lambda v: _email("participant_email", v),
                  "event_start": lambda v: _datetime("event_start", v), "duration": self._duration}
        if field not in checks:
            raise WorkbenchError(f"field must be one of {', '.join(checks)}, got {field!r}.")
        return checks[field](value)

    @staticmethod
    def _duration(value):
        if not value.isdigit() or not 0 < int(value) <= 600:
            raise WorkbenchError(f'duration is a number of minutes from 1 to 600, e.g. "30", got {value!r}.')
        return str(int(value))

    def calendar__create_event(self, **fields):
        return self._add("calendar", "event_id", {k: self._event_field(k, v) for k, v in fields.items()})

    def calendar__delete_event(self, event_id):
        return self._delete("calendar", "event_id", event_id, "Event")

    def calendar__update_event(self, event_id, field, new_value):
        return self._update("calendar", "event_id", event_id, "Event", field, self._event_field(field, new_value))

    # ---- email ----

    def email__get_email_information_by_id(self, email_id, field):
        return self._field("email", "email_id", email_id, field, "Email")

    def email__search_emails(self, query="", date_min=None, date_max=None):
        lo = _date("date_min", date_min) if date_min else None
        hi = _date("date_max", date_max) if date_max else None
        found = [e for e in self.db["email"] if any(_contains(e[k], query) for k in ("sender", "subject", "body"))
                 and (not lo or e["sent_datetime"][:10] >= lo) and (not hi or e["sent_datetime"][:10] <= hi)]
        return sorted(found, key=lambda e: e["sent_datetime"], reverse=True)[:RESULT_LIMIT] or "No emails found."

    def _send(self, recipient, subject, body):
        email = {"sender": ME, "recipient": _email("recipient", recipient), "subject": subject,
                 "sent_datetime": _fmt(NOW), "body": body, "email_id": _next_id(self.db["email"], "email_id")}
        self.db["email"].append(email)
        return "Email sent successfully."

    def email__send_email(self, recipient, subject, body):
        return self._send(recipient, subject, body)

    def email__delete_email(self, email_id):
        return self._delete("email", "email_id", email_id, "Email")

    def email__forward_email(self, email_id, recipient):
        email = _row(self.db["email"], "email_id", email_id, "Email")
        return self._send(recipient, f"FW: {email['subject']}", email["body"])

    def email__reply_email(self, email_id, body):
        email = _row(self.db["email"], "email_id", email_id, "Email")
        return self._send(email["sender"], f"RE: {email['subject']}", body)

    # ---- analytics ----

    def _days(self, time_min, time_max):
        lo = _date("time_min", time_min) if time_min else None
        hi = _date("time_max", time_max) if time_max else None
        return [v for v in self.db["analytics"] if (not lo or v["date_of_visit"] >= lo)
                and (not hi or v["date_of_visit"] <= hi)]

    @staticmethod
    def _per_day(visits, value) -> dict:
        out: dict = {}
        for v in visits:
            out.setdefault(v["date_of_visit"], []).append(value(v))
        return out

    def analytics__get_visitor_information_by_id(self, visitor_id):
        return _row(self.db["analytics"], "visitor_id", visitor_id, "Visitor")

    def analytics__create_plot(self, time_min, time_max, value_to_plot, plot_type):
        _date("time_min", time_min), _date("time_max", time_max)
        _one_of("value_to_plot", value_to_plot, PLOT_VALUES), _one_of("plot_type", plot_type, PLOT_TYPES)
        path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
        self.db["plots"].append({"file_path": path})
        return path

    def analytics__total_visits_count(self, time_min=None, time_max=None):
        return {d: len(v) for d, v in self._per_day(self._days(time_min, time_max), lambda v: 1).items()}

    def analytics__engaged_users_count(self, time_min=None, time_max=None):
        return {d: sum(v) for d, v in self._per_day(self._days(time_min, time_max),
                                                     lambda v: v["user_engaged"] == "True").items()}

    def analytics__traffic_source_count(self, traffic_source, time_min=None, time_max=None):
        _one_of("traffic_source", traffic_source, SOURCES)
        return {d: sum(v) for d, v in self._per_day(self._days(time_min, time_max),
                                                     lambda v: v["traffic_source"] == traffic_source).items()}

    def analytics__get_average_session_duration(self, time_min=None, time_max=None):
        per_day = self._per_day(self._days(time_min, time_max), lambda v: float(v["session_duration_seconds"]))
        return {d: round(sum(v) / len(v), 1) for d, v in per_day.items()}

    # ---- project management ----

    def _task_field(self, field, value):
        checks = {"task_name": lambda v: v, "assigned_to_email": lambda v: _email("assigned_to_email", v),
                  "list_name": lambda v: _one_of("list_name", v, LISTS), "due_date": lambda v: _date("due_date", v),
                  "board": lambda v: _one_of("board", v, BOARDS)}
        if field not in checks:
            raise WorkbenchError(f"field must be one of {', '.join(checks)}, got {field!r}.")
        return checks[field](value)

    def project_management__get_task_information_by_id(self, task_id, field):
        return self._field("project_management", "task_id", task_id, field, "Task")

    def project_management__search_tasks(self, **fields):
        if not fields:
            raise WorkbenchError("give at least one field to search tasks by.")
        found = [t for t in self.db["project_management"] if all(
            _contains(t[k], v) if k == "task_name" else t[k].lower() == v.lower() for k, v in fields.items())]
        return found[:RESULT_LIMIT] or "No tasks found."

    def project_management__create_task(self, **fields):
        return self._add("project_management", "task_id", {k: self._task_field(k, v) for k, v in fields.items()})

    def project_management__delete_task(self, task_id):
        return self._delete("project_management", "task_id", task_id, "Task")

    def project_management__update_task(self, task_id, field, new_value):
        return self._update("project_management", "task_id", task_id, "Task", field, self._task_field(field, new_value))

    # ---- customer relationship manager ----

    def _customer_field(self, field, value):
        checks = {"customer_name": lambda v: v, "customer_email": lambda v: _email("customer_email", v),
                  "customer_phone": lambda v: v, "last_contact_date": lambda v: _date("last_contact_date", v),
                  "product_interest": lambda v: _one_of("product_interest", v, PRODUCTS),
                  "status": lambda v: _one_of("status", v, STATUSES),
                  "assigned_to_email": lambda v: _email("assigned_to_email", v), "notes": lambda v: v,
                  "follow_up_by": lambda v: _date("follow_up_by", v)}
        if field not in checks:
            raise WorkbenchError(f"field must be one of {', '.join(checks)}, got {field!r}.")
        return checks[field](value)

    def customer_relationship_manager__search_customers(self, **fields):
        if not fields:
            raise WorkbenchError("give at least one field to search customers by.")
        lo, hi = fields.pop("last_contact_date_min", None), fields.pop("last_contact_date_max", None)
        found = [c for c in self.db["customer_relationship_manager"]
                 if all(_contains(c[k], v) for k, v in fields.items())
                 and (not lo or c["last_contact_date"] >= _date("last_contact_date_min", lo))
                 and (not hi or c["last_contact_date"] <= _date("last_contact_date_max", hi))]
        return found[:RESULT_LIMIT] or "No customers found."

    def customer_relationship_manager__update_customer(self, customer_id, field, new_value):
        return self._update("customer_relationship_manager", "customer_id", customer_id, "Customer", field,
                            self._customer_field(field, new_value))

    def customer_relationship_manager__add_customer(self, **fields):
        blank = {k: "" for k in CUSTOMER_FIELDS}  # a customer has every field, empty unless given
        return self._add("customer_relationship_manager", "customer_id",
                         {**blank, **{k: self._customer_field(k, v) for k, v in fields.items()}})

    def customer_relationship_manager__delete_customer(self, customer_id):
        return self._delete("customer_relationship_manager", "customer_id", customer_id, "Customer")


def parsed_arguments(name: str, arguments) -> dict:
    """A call's arguments as the tool takes them (strings, empty ones dropped): how a call is recorded."""
    return _arguments(TOOLS[name], arguments)


def replay(calls: list[dict], db: dict | None = None, seed: int = 0) -> tuple[Sandbox, list[tuple[bool, str]]]:
    """Run `calls` ({"name", "arguments"}) in order on a fresh sandbox; (the sandbox, (ok, text) per call).
    A bad call is reported and skipped, as in an episode."""
    box, results = Sandbox(db, seed), []
    for c in calls:
        try:
            results.append((True, box.call(c["name"], c["arguments"])))
        except WorkbenchError as e:
            results.append((False, f"Error: {e}"))
    return box, results


def outcome_correct(gold: list[dict], calls: list[dict], db: dict | None = None, seed: int = 0) -> bool:
    """WorkBench's outcome check: `calls` leave the databases exactly as the gold calls do."""
    return replay(calls, db, seed)[0].state() == replay(gold, db, seed)[0].state()
