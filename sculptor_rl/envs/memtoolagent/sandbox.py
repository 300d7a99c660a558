"""A WorkBench sandbox (Styles et al., 2024; github.com/olly-styles/WorkBench): in-memory workplace databases and
the 27 tools over them, with WorkBench's own semantics.

The databases are WorkBench's own (`load_database`: its `data/processed` CSVs and `data/raw/email_addresses.csv`)
or, for generated tasks, ones generated deterministically from a seed in the same layout, at WorkBench's fixed
"now": Thursday 2023-11-30 00:00:00. The tools keep WorkBench's names, parameters (strings; a number is taken as
its decimal text) and behaviour, tool by tool as in its `src/tools/*.py`: the same argument domains (what a tool
accepts it stores as given, e.g. a `duration` of "1 hour"; `analytics.create_plot` plots the seven values its
code lists), the same refusals with WorkBench's own messages (an assignee outside the team, a status outside
five), the same ids (max + 1) and lower-casing of emails. A refusal raises `WorkbenchError` with that message and
changes nothing, as WorkBench's tools return it and change nothing.

The outcome check is WorkBench's `is_correct` (src/evals/utils.py): the final tables (calendar, emails, plots,
project tasks, customers) must equal those the gold calls reach from the same start, as pandas' `DataFrame.equals`
compares them (row order, index labels and columns count), every value lower-cased except `status`, `list_name`
and `board`. `Sandbox.state()` is that compared form; so each table keeps its pandas index labels, which WorkBench's
writes move as pandas moves them (`pd.concat` with or without `ignore_index`, `.loc[len(df)] = row`). One
difference: dtypes are not compared (pandas does; no tool sequence of the release tells them apart).
"""

from __future__ import annotations

import copy
import csv
import json
import random
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path

from ...toolcalls import json_object

__all__ = ["NOW", "PEOPLE", "TOOLS", "WorkbenchError", "Sandbox", "database", "load_database", "outcome_correct",
           "parsed_arguments", "replay", "start_database", "tool_schemas"]

NOW = datetime(2023, 11, 30, 0, 0, 0)  # WorkBench's HARDCODED_CURRENT_TIME: Thursday, 2023-11-30 00:00:00
PEOPLE = ["Carlos Rodriguez", "Nadia Moreau", "Yuki Tanaka", "Raj Patel", "Sofia Santos", "Akira Sato",
          "Lena Fischer", "Dmitri Ivanov", "Fatima Khan", "Chenwei Zhang", "Santiago Martinez", "Amir Ibrahim"]
CUSTOMERS = ["Dakota Wilson", "Cameron Anderson", "Quinn Thomas", "Jordan Lee", "Morgan Hayes", "Riley Brooks",
             "Avery Clark", "Taylor Reed", "Casey Morgan", "Jamie Foster", "Drew Collins", "Skyler Price"]
# the value sets WorkBench's tools check (src/tools/*.py)
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
SOURCES = ("direct", "referral", "search engine", "social media")
PLOT_VALUES = ("total_visits", "session_duration_seconds", "user_engaged", "visits_direct", "visits_referral",
               "visits_search_engine", "visits_social_media")
PLOT_TYPES = ("bar", "line", "scatter", "histogram")
TOPICS = ["Quarterly Tech Roundup", "Homepage Alignment", "UX Feedback Submission", "Supply Chain Workshop",
          "Budget Review", "Hiring Plan", "Security Audit", "Product Launch", "Client Onboarding", "Team Offsite"]
TASK_NAMES = ["Fix login bug", "Design landing page", "Update API docs", "Refactor payment service",
              "Write onboarding guide", "Migrate database", "Create style guide", "Improve search latency",
              "Add dark mode", "Set up monitoring", "Review pull requests", "Plan sprint demo"]
# WorkBench's column order of each table (its CSVs)
COLUMNS = {
    "calendar": ("event_id", "event_name", "participant_email", "event_start", "duration"),
    "email": ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body"),
    "customer_relationship_manager": ("customer_id", "assigned_to_email", "customer_name", "customer_email",
                                      "customer_phone", "last_contact_date", "product_interest", "status",
                                      "follow_up_by", "notes"),
    "project_management": ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board"),
    "analytics": ("date_of_visit", "visitor_id", "page_views", "session_duration_seconds", "traffic_source",
                  "user_engaged"),
    "plots": ("file_path",),
    "company_directory": ("email_address",),
}
COMPARED = ("calendar", "email", "plots", "project_management", "customer_relationship_manager")  # is_correct's
CASE_KEPT = ("status", "list_name", "board")  # is_correct compares these as they are, the rest lower-cased
RESULT_LIMIT = 5  # WorkBench's searches of events, emails and customers return at most 5 rows


class WorkbenchError(Exception):
    """A call WorkBench's tool refuses (its own message) or cannot take; the databases are unchanged."""


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
    events = [{"event_id": f"{i:08d}", **e} for i, e in enumerate(events)]
    for i in range(30):
        sender = rng.choice(people)
        sent = NOW - timedelta(days=rng.randint(1, 40), hours=rng.randint(0, 12), minutes=rng.randint(0, 59))
        topic = rng.choice(TOPICS)
        emails.append({"inbox/outbox": "inbox", "sender/recipient": sender, "subject": f"Update on {topic}",
                       "sent_datetime": _fmt(sent),
                       "body": f"Hi, here is the latest on {topic.lower()}. Let me know what you think."})
    emails.sort(key=lambda e: e["sent_datetime"])
    emails = [{"email_id": f"{i:08d}", **e} for i, e in enumerate(emails)]
    for i, name in enumerate(CUSTOMERS):
        last = NOW.date() - timedelta(days=rng.randint(1, 40))
        drawn = {"customer_id": f"{i:08d}", "customer_name": name,
                 "customer_email": email_of(name).replace("atlas", "example"),
                 "customer_phone": f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
                 "last_contact_date": str(last), "product_interest": rng.choice(PRODUCTS),
                 "status": rng.choice(STATUSES), "assigned_to_email": rng.choice(people), "notes": "",
                 "follow_up_by": str(last + timedelta(days=14))}
        customers.append({k: drawn[k] for k in COLUMNS["customer_relationship_manager"]})
    for i, name in enumerate(TASK_NAMES):
        tasks.append({"task_id": f"{i:08d}", "task_name": name, "assigned_to_email": rng.choice(people),
                      "list_name": rng.choice(LISTS), "due_date": str(NOW.date() + timedelta(days=rng.randint(-5, 30))),
                      "board": rng.choice(BOARDS)})
    for d in range(60):  # 2023-10-01 .. 2023-11-29
        day = date(2023, 10, 1) + timedelta(days=d)
        for _ in range(rng.randint(0, 6)):
            visits.append({"date_of_visit": str(day), "visitor_id": f"{len(visits):04d}",
                           "page_views": str(rng.randint(1, 12)), "session_duration_seconds": str(rng.randint(5, 600)),
                           "traffic_source": rng.choice(SOURCES), "user_engaged": rng.choice(["True", "False"])})
    return json.dumps({"calendar": events, "email": emails, "customer_relationship_manager": customers,
                       "project_management": tasks, "analytics": visits, "plots": [],
                       "company_directory": [{"email_address": e} for e in people]})


def database(seed: int = 0) -> dict:
    """A fresh copy of the databases generated from `seed` (WorkBench has one fixed database: seed 0)."""
    return json.loads(_database(seed))


def _rows(path: Path, header: tuple[str, ...] | None = None) -> list[dict]:
    """A CSV's rows as strings (pandas' `dtype=str`; an empty cell is ""); `header` names the columns of a file
    that has no header row."""
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [dict(r) for r in csv.DictReader(f, fieldnames=header)]


@lru_cache(maxsize=2)
def _load(folder: str) -> str:
    root = Path(folder)
    # the directory is data/raw/email_addresses.csv, read with header=None (company_directory.py)
    directory = root / "email_addresses.csv"
    if not directory.exists():
        directory = root.parent / "raw" / "email_addresses.csv"
    return json.dumps({"calendar": _rows(root / "calendar_events.csv"), "email": _rows(root / "emails.csv"),
                       "customer_relationship_manager": _rows(root / "customer_relationship_manager_data.csv"),
                       "project_management": _rows(root / "project_tasks.csv"),
                       "analytics": _rows(root / "analytics_data.csv"), "plots": [],
                       "company_directory": _rows(directory, COLUMNS["company_directory"])})


def load_database(folder: str | Path) -> dict:
    """WorkBench's databases (its `data/processed` CSVs; the directory from that folder or `../raw`) in the
    sandbox's layout: each table a list of rows with WorkBench's columns; a missing file is an empty table.
    A fresh copy each call."""
    if not Path(folder).is_dir():
        raise ValueError(f"WorkBench database folder {folder} does not exist")
    return json.loads(_load(str(Path(folder).resolve())))


def start_database(meta: dict) -> dict:
    """The databases a record's episode starts from: WorkBench's own (`meta.database`, an imported record's) or
    the generated ones (`meta.database_seed`, default 0)."""
    return load_database(meta["database"]) if meta.get("database") else database(meta.get("database_seed", 0))


@dataclass(frozen=True)
class Tool:
    name: str  # "domain.function"
    description: str
    params: dict  # parameter -> description
    required: tuple


def _tool(tool_name, description, required=(), /, **params) -> Tool:
    return Tool(tool_name, description, params, tuple(required))


_DATE = 'Date, "YYYY-MM-DD".'
TOOLS = {t.name: t for t in (
    _tool("company_directory.find_email_address", "Find the email addresses containing `name` (lower-cased).",
          ["name"], name="Name or part of a name of the colleague."),
    _tool("calendar.get_event_information_by_id", "One field of an event.", ["event_id", "field"],
          event_id="8-digit ID of the event.",
          field='One of "event_id", "event_name", "participant_email", "event_start", "duration".'),
    _tool("calendar.search_events", f"Events whose name or participant email contains `query` (case-insensitive), "
          f"optionally starting in a time range; at most {RESULT_LIMIT}.",
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
          field='One of "email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body".'),
    _tool("email.search_emails", f"Emails whose subject, body and sender/recipient hold every word of `query` "
          f"(case-insensitive), optionally sent in a date range; at most {RESULT_LIMIT}, newest first.",
          query="Words to find.", date_min='Earliest send date, "YYYY-MM-DD".',
          date_max='Latest send date, "YYYY-MM-DD".'),
    _tool("email.send_email", "Send an email.", ["recipient", "subject", "body"],
          recipient="Email address of the recipient.", subject="Subject line.", body="Text of the email."),
    _tool("email.delete_email", "Delete an email.", ["email_id"], email_id="8-digit ID of the email."),
    _tool("email.forward_email", "Forward an email.", ["email_id", "recipient"], email_id="8-digit ID of the email.",
          recipient="Email address to forward it to."),
    _tool("email.reply_email", "Reply to the sender of an email.", ["email_id", "body"],
          email_id="8-digit ID of the email.", body="Text of the reply."),
    _tool("analytics.get_visitor_information_by_id", "A website visit's data.", ["visitor_id"],
          visitor_id="ID of the visitor."),
    _tool("analytics.create_plot", "Plot a daily value over a date range; returns the plot's file path.",
          ["time_min", "time_max", "value_to_plot", "plot_type"], time_min=f"Start. {_DATE}", time_max=f"End. {_DATE}",
          value_to_plot=f"One of {', '.join(PLOT_VALUES)}.", plot_type=f"One of {', '.join(PLOT_TYPES)}."),
    _tool("analytics.total_visits_count", "Visits per day in a date range.", time_min=f"Start. {_DATE}",
          time_max=f"End. {_DATE}"),
    _tool("analytics.engaged_users_count", "Engaged users per day in a date range.", time_min=f"Start. {_DATE}",
          time_max=f"End. {_DATE}"),
    _tool("analytics.traffic_source_count", "Visits per day from one traffic source in a date range.",
          time_min=f"Start. {_DATE}", time_max=f"End. {_DATE}", traffic_source=f"One of {', '.join(SOURCES)}."),
    _tool("analytics.get_average_session_duration", "Average session duration in seconds per day in a date range.",
          time_min=f"Start. {_DATE}", time_max=f"End. {_DATE}"),
    _tool("project_management.get_task_information_by_id", "One field of a task.", ["task_id", "field"],
          task_id="8-digit ID of the task.",
          field='One of "task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board".'),
    _tool("project_management.search_tasks", "Tasks whose every given field contains the value given "
          "(case-insensitive).", task_name="Text in the task name.", assigned_to_email="Email of the assignee.",
          list_name=f"One of {', '.join(LISTS)}.", due_date=_DATE, board=f"One of {', '.join(BOARDS)}."),
    _tool("project_management.create_task", "Create a task; returns its ID.",
          ["task_name", "assigned_to_email", "list_name", "due_date", "board"], task_name="Name of the task.",
          assigned_to_email="Email of the assignee (a team member).", list_name=f"One of {', '.join(LISTS)}.",
          due_date=_DATE, board=f"One of {', '.join(BOARDS)}."),
    _tool("project_management.delete_task", "Delete a task.", ["task_id"], task_id="8-digit ID of the task."),
    _tool("project_management.update_task", "Set one field of a task.", ["task_id", "field", "new_value"],
          task_id="8-digit ID of the task.",
          field='One of "task_name", "assigned_to_email", "list_name", "due_date", "board".', new_value="New value."),
    _tool("customer_relationship_manager.search_customers", f"Customers whose every given field contains the value "
          f"given (case-insensitive; dates as bounds); at least one field; at most {RESULT_LIMIT}.",
          customer_name="Text in the customer's name.", customer_email="Customer's email.",
          product_interest=f"One of {', '.join(PRODUCTS)}.", status=f"One of {', '.join(STATUSES)}.",
          assigned_to_email="Email of the colleague assigned.", last_contact_date_min=_DATE,
          last_contact_date_max=_DATE, follow_up_by_min=_DATE, follow_up_by_max=_DATE),
    _tool("customer_relationship_manager.update_customer", "Set one field of a customer.",
          ["customer_id", "field", "new_value"], customer_id="8-digit ID of the customer.",
          field='One of "customer_name", "customer_email", "customer_phone", "last_contact_date", '
                '"product_interest", "status", "assigned_to_email", "notes", "follow_up_by".',
          new_value="New value."),
    _tool("customer_relationship_manager.add_customer", "Add a customer; returns its ID.",
          ["customer_name", "assigned_to_email", "status"], customer_name="Name.",
          assigned_to_email="Email of the colleague assigned.", status=f"One of {', '.join(STATUSES)}.",
          customer_email="Customer's email.", customer_phone="Phone number.", last_contact_date=_DATE,
          product_interest=f"One of {', '.join(PRODUCTS)}.", notes="Notes.", follow_up_by=_DATE),
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
    """The arguments as WorkBench's function receives them: strings as given (a number as its text; None as not
    given). A name the function does not take is refused (Python would raise TypeError)."""
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
        out[key] = value
    return out


def _contains(text, pattern: str) -> bool:
    """pandas' `str.contains(pattern, case=False)`: a regular expression, case-insensitive."""
    try:
        return re.search(pattern, text or "", re.IGNORECASE) is not None
    except re.error as e:
        raise WorkbenchError(f"bad search pattern {pattern!r} ({e}).") from None


def _timestamp(name: str, value: str) -> datetime:
    """`pd.Timestamp(value)` for the ISO forms WorkBench's data and queries use."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise WorkbenchError(f'{name} must be a date "YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS", got {value!r}.') from None


def _lower(column: str, value):
    return value.lower() if isinstance(value, str) and column not in CASE_KEPT else value


class Sandbox:
    """The databases of one episode and the tools over them (`call`). `db[table]` is its rows in order; `index`
    their pandas index labels (0..n-1 at the start, as WorkBench reads a CSV)."""

    def __init__(self, db: dict | None = None, seed: int = 0):
        self.db = copy.deepcopy(db) if db is not None else database(seed)
        self.index = {name: list(range(len(rows))) for name, rows in self.db.items()}

    def state(self) -> dict:
        """The tables WorkBench's `is_correct` compares, as it compares them: per table its columns, index labels
        and rows in order, values lower-cased except status, list_name and board."""
        out = {}
        for name in COMPARED:
            columns = self._columns(name)
            out[name] = {"columns": columns, "index": list(self.index[name]),
                         "rows": [[_lower(c, r.get(c)) for c in columns] for r in self.db[name]]}
        return out

    def call(self, name: str, arguments) -> str:
        """Run one tool; its result as text. WorkbenchError (nothing changed) on a refused call."""
        if name not in TOOLS:
            raise WorkbenchError(f"unknown tool {name!r}; the tools are named like calendar.create_event.")
        args = _arguments(TOOLS[name], arguments)
        result = getattr(self, name.replace(".", "__"))(**args)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    # ---- rows, moved as pandas moves them in WorkBench's tools ----

    def _columns(self, table: str) -> list[str]:
        return list(dict.fromkeys([*COLUMNS[table], *(k for r in self.db[table] for k in r)]))

    def _matches(self, table: str, key: str, id_: str) -> list[dict]:
        return [r for r in self.db[table] if r.get(key) == id_]

    def _next_id(self, table: str, key: str, width: int = 8) -> str:
        """`str(int(df[key].max()) + 1).zfill(width)`: the max of the id strings (as text, as pandas takes it)."""
        return str(int(max(r[key] for r in self.db[table])) + 1).zfill(width)

    def _concat(self, table: str, row: dict, ignore_index: bool):
        """`pd.concat([df, one_row_df])`: the new row's label is 0, or every label renumbered with ignore_index."""
        self.db[table].append(row)
        self.index[table] = list(range(len(self.db[table]))) if ignore_index else [*self.index[table], 0]

    def _loc_len(self, table: str, row: dict):
        """`df.loc[len(df)] = row`: overwrites the row labelled len(df) where one is (after a deletion), else
        appends it with that label."""
        label, labels = len(self.db[table]), self.index[table]
        if label in labels:
            self.db[table][labels.index(label)] = row
        else:
            self.db[table].append(row)
            labels.append(label)

    def _drop(self, table: str, key: str, id_: str):
        """`df[df[key] != id_]`: the rows kept with their labels."""
        kept = [(r, i) for r, i in zip(self.db[table], self.index[table]) if r.get(key) != id_]
        self.db[table], self.index[table] = [r for r, _ in kept], [i for _, i in kept]

    def _set(self, table: str, key: str, id_: str, field: str, value: str):
        """`df.loc[df[key] == id_, field] = value`: a field the table lacks becomes a new column (empty elsewhere)."""
        for r in self.db[table]:
            r.setdefault(field, None)
            if r.get(key) == id_:
                r[field] = value

    def _field(self, table: str, key: str, id_, field, what: str):
        if not id_:
            raise WorkbenchError(f"{what} ID not provided.")
        if not field:
            raise WorkbenchError("Field not provided.")
        found = self._matches(table, key, id_)
        if not found:
            raise WorkbenchError(f"{what} not found.")
        if field not in found[0]:
            raise WorkbenchError("Field not found.")
        return {field: found[0][field]}

    # ---- company directory ----

    def company_directory__find_email_address(self, name=""):
        if name == "":
            raise WorkbenchError("Name not provided.")
        try:
            pattern = re.compile(name.lower())
        except re.error as e:
            raise WorkbenchError(f"bad name pattern {name!r} ({e}).") from None
        return [r["email_address"] for r in self.db["company_directory"] if pattern.search(r["email_address"])]

    # ---- calendar ----

    def calendar__get_event_information_by_id(self, event_id=None, field=None):
        return self._field("calendar", "event_id", event_id, field, "Event")

    def calendar__search_events(self, query="", time_min=None, time_max=None):
        lo = _timestamp("time_min", time_min) if time_min else None
        hi = _timestamp("time_max", time_max) if time_max else None
        found = [e for e in self.db["calendar"] if _contains(e["event_name"], query)
                 or _contains(e["participant_email"], query)]
        found = [e for e in found if (not lo or _timestamp("event_start", e["event_start"]) >= lo)
                 and (not hi or _timestamp("event_start", e["event_start"]) <= hi)]
        return found[:RESULT_LIMIT] or "No events found."

    def calendar__create_event(self, event_name=None, participant_email=None, event_start=None, duration=None):
        for value, message in ((event_name, "Event name"), (participant_email, "Participant email"),
                               (event_start, "Event start"), (duration, "Event duration")):
            if not value:
                raise WorkbenchError(f"{message} not provided.")
        event_id = self._next_id("calendar", "event_id")
        self._concat("calendar", {"event_id": event_id, "event_name": event_name,
                                  "participant_email": participant_email.lower(), "event_start": event_start,
                                  "duration": duration}, ignore_index=False)
        return event_id

    def calendar__delete_event(self, event_id=None):
        if not event_id:
            raise WorkbenchError("Event ID not provided.")
        if not self._matches("calendar", "event_id", event_id):
            raise WorkbenchError("Event not found.")
        self._drop("calendar", "event_id", event_id)
        return "Event deleted successfully."

    def calendar__update_event(self, event_id=None, field=None, new_value=None):
        if not event_id or not field or not new_value:
            raise WorkbenchError("Event ID, field, or new value not provided.")
        if not self._matches("calendar", "event_id", event_id):
            raise WorkbenchError("Event not found.")
        self._set("calendar", "event_id", event_id, field,
                  new_value.lower() if field == "participant_email" else new_value)
        return "Event updated successfully."

    # ---- email ----

    def email__get_email_information_by_id(self, email_id=None, field=None):
        return self._field("email", "email_id", email_id, field, "Email")

    def email__search_emails(self, query="", date_min=None, date_max=None):
        words = query.lower().split()
        found = [e for e in self.db["email"]
                 if all(w in f"{e['subject']} {e['body']} {e['sender/recipient']}".lower() for w in words)]
        found.sort(key=lambda e: e["sent_datetime"], reverse=True)
        lo = _timestamp("date_min", date_min).date() if date_min else None
        hi = _timestamp("date_max", date_max).date() if date_max else None
        found = [e for e in found if (not lo or _timestamp("sent_datetime", e["sent_datetime"]).date() >= lo)
                 and (not hi or _timestamp("sent_datetime", e["sent_datetime"]).date() <= hi)]
        return found[:RESULT_LIMIT] or "No emails found."

    def email__send_email(self, recipient=None, subject=None, body=None):
        if not recipient or not subject or not body:
            raise WorkbenchError("Recipient, subject, or body not provided.")
        if "@" not in recipient or "." not in recipient:
            raise WorkbenchError("Invalid recipient email address.")
        # WorkBench's sent ids are not zero-padded: str(int(max) + 1)
        email_id = str(int(max(r["email_id"] for r in self.db["email"])) + 1)
        self._loc_len("email", {"email_id": email_id, "inbox/outbox": "outbox", "sender/recipient": recipient.lower(),
                                "subject": subject, "sent_datetime": _fmt(NOW), "body": body})
        return "Email sent successfully."

    def email__delete_email(self, email_id=None):
        if not email_id:
            raise WorkbenchError("Email ID not provided.")
        if not self._matches("email", "email_id", email_id):
            raise WorkbenchError("Email not found.")
        self._drop("email", "email_id", email_id)
        return "Email deleted successfully."

    def email__forward_email(self, email_id=None, recipient=None):
        if not email_id or not recipient:
            raise WorkbenchError("Email ID or recipient not provided.")
        found = self._matches("email", "email_id", email_id)
        if not found:
            raise WorkbenchError("Email not found.")
        self.email__send_email(recipient, f"FW: {found[0]['subject']}", found[0]["body"])
        return "Email forwarded successfully."

    def email__reply_email(self, email_id=None, body=None):
        if not email_id or not body:
            raise WorkbenchError("Email ID or body not provided.")
        found = self._matches("email", "email_id", email_id)
        if not found:
            raise WorkbenchError("Email not found.")
        self.email__send_email(found[0]["sender/recipient"], found[0]["subject"], body)  # the subject as it is
        return "Email replied successfully."

    # ---- analytics (dates compared as text, as WorkBench compares them) ----

    def _visits(self, time_min, time_max) -> list[dict]:
        return [v for v in self.db["analytics"] if (not time_min or v["date_of_visit"] >= time_min)
                and (not time_max or v["date_of_visit"] <= time_max)]

    @staticmethod
    def _per_day(visits, value) -> dict:
        out: dict = {}
        for v in sorted(visits, key=lambda v: v["date_of_visit"]):
            out.setdefault(v["date_of_visit"], []).append(value(v))
        return out

    def analytics__get_visitor_information_by_id(self, visitor_id=None):
        if not visitor_id:
            raise WorkbenchError("Visitor ID not provided.")
        found = [{**v, "user_engaged": v["user_engaged"] == "True"} for v in self.db["analytics"]
                 if v["visitor_id"] == visitor_id]
        if not found:
            raise WorkbenchError("Visitor not found.")
        return found

    def analytics__create_plot(self, time_min=None, time_max=None, value_to_plot=None, plot_type=None):
        if not time_min:
            raise WorkbenchError("Start date not provided.")
        if not time_max:
            raise WorkbenchError("End date not provided.")
        if value_to_plot not in PLOT_VALUES:
            raise WorkbenchError("Value to plot must be one of 'total_visits', 'session_duration_seconds', "
                                 "'user_engaged', 'direct', 'referral', 'search engine', 'social media'")
        if plot_type not in PLOT_TYPES:
            raise WorkbenchError("Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'")
        path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
        self._loc_len("plots", {"file_path": path})
        return path

    def analytics__total_visits_count(self, time_min=None, time_max=None):
        return {d: len(v) for d, v in self._per_day(self._visits(time_min, time_max), lambda v: 1).items()}

    def analytics__engaged_users_count(self, time_min=None, time_max=None):
        return {d: sum(v) for d, v in self._per_day(self._visits(time_min, time_max),
                                                     lambda v: v["user_engaged"] == "True").items()}

    def analytics__traffic_source_count(self, time_min=None, time_max=None, traffic_source=None):
        count = (lambda v: v["traffic_source"] == traffic_source) if traffic_source else (lambda v: 1)
        return {d: sum(v) for d, v in self._per_day(self._visits(time_min, time_max), count).items()}

    def analytics__get_average_session_duration(self, time_min=None, time_max=None):
        per_day = self._per_day(self._visits(time_min, time_max), lambda v: float(v["session_duration_seconds"]))
        return {d: sum(v) / len(v) for d, v in per_day.items()}

    # ---- project management ----

    def _team(self) -> set[str]:
        """The assignees WorkBench accepts: those of the tasks the table holds now."""
        return {t["assigned_to_email"].lower() for t in self.db["project_management"]}

    def project_management__get_task_information_by_id(self, task_id=None, field=None):
        return self._field("project_management", "task_id", task_id, field, "Task")

    def project_management__search_tasks(self, task_name=None, assigned_to_email=None, list_name=None,
                                         due_date=None, board=None):
        given = {k: v for k, v in (("task_name", task_name), ("assigned_to_email", assigned_to_email),
                                   ("list_name", list_name), ("due_date", due_date), ("board", board)) if v}
        if not given:
            raise WorkbenchError("No search parameters provided.")
        return [t for t in self.db["project_management"] if all(_contains(t[k], v) for k, v in given.items())]

    def project_management__create_task(self, task_name=None, assigned_to_email=None, list_name=None, due_date=None,
                                        board=None):
        if not all([task_name, assigned_to_email, list_name, due_date, board]):
            raise WorkbenchError("Missing task details.")
        self._check_task("assigned_to_email", assigned_to_email.lower())
        self._check_task("list_name", list_name)
        self._check_task("board", board)
        task_id = self._next_id("project_management", "task_id")
        self._concat("project_management", {"task_id": task_id, "task_name": task_name,
                                            "assigned_to_email": assigned_to_email.lower(), "list_name": list_name,
                                            "due_date": due_date, "board": board}, ignore_index=True)
        return task_id

    def _check_task(self, field: str, value: str):
        if field == "board" and value not in BOARDS:
            raise WorkbenchError("Board not valid. Please choose from: 'Back end', 'Front end', 'Design'.")
        if field == "list_name" and value not in LISTS:
            raise WorkbenchError("List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', "
                                 "'Completed'.")
        if field == "assigned_to_email" and value not in self._team():
            raise WorkbenchError("Assignee email not valid. Please choose from the list of team members.")

    def project_management__delete_task(self, task_id=None):
        if not task_id:
            raise WorkbenchError("Task ID not provided.")
        if not self._matches("project_management", "task_id", task_id):
            raise WorkbenchError("Task not found.")
        self._drop("project_management", "task_id", task_id)
        return "Task deleted successfully."

    def project_management__update_task(self, task_id=None, field=None, new_value=None):
        if not task_id or not field or not new_value:
            raise WorkbenchError("Task ID, field, or new value not provided.")
        if field == "assigned_to_email":
            new_value = new_value.lower()
        self._check_task(field, new_value)
        if not self._matches("project_management", "task_id", task_id):
            raise WorkbenchError("Task not found.")
        if field not in self._columns("project_management"):
            raise WorkbenchError("Field not valid.")
        self._set("project_management", "task_id", task_id, field, new_value)
        return "Task updated successfully."

    # ---- customer relationship manager ----

    def customer_relationship_manager__search_customers(self, customer_name=None, customer_email=None,
                                                        product_interest=None, status=None, assigned_to_email=None,
                                                        last_contact_date_min=None, last_contact_date_max=None,
                                                        follow_up_by_min=None, follow_up_by_max=None):
        text = {k: v for k, v in (("customer_name", customer_name), ("customer_email", customer_email),
                                  ("product_interest", product_interest), ("status", status),
                                  ("assigned_to_email", assigned_to_email)) if v}
        bounds = [(k, lo, hi) for k, lo, hi in (("last_contact_date", last_contact_date_min, last_contact_date_max),
                                                ("follow_up_by", follow_up_by_min, follow_up_by_max))]
        if not text and not any(lo or hi for _, lo, hi in bounds):
            raise WorkbenchError("No search parameters provided. Please provide at least one parameter.")
        found = [c for c in self.db["customer_relationship_manager"]
                 if all(_contains(c[k], v) for k, v in text.items())
                 and all((not lo or (c[k] or "") >= lo) and (not hi or c[k] is not None and c[k] <= hi)
                         for k, lo, hi in bounds)]  # an empty date (pandas' NaN) is outside every bound
        return found[:RESULT_LIMIT]

    def customer_relationship_manager__update_customer(self, customer_id=None, field=None, new_value=None):
        if not customer_id or not field or not new_value:
            raise WorkbenchError("Customer ID, field, or new value not provided.")
        if field == "status" and new_value not in STATUSES:
            raise WorkbenchError("Status not valid. Please choose from: 'Qualified', 'Won', 'Lost', 'Lead', "
                                 "'Proposal'")
        if field == "product_interest" and new_value not in PRODUCTS:
            raise WorkbenchError("Product interest not valid. Please choose from: 'Software', 'Hardware', "
                                 "'Services', 'Consulting', 'Training'")
        if field in ("customer_email", "assigned_to_email"):
            new_value = new_value.lower()
        if not self._matches("customer_relationship_manager", "customer_id", customer_id):
            raise WorkbenchError("Customer not found.")
        if field not in self._columns("customer_relationship_manager"):
            raise WorkbenchError("Field not valid. Please choose from: 'customer_name', 'assigned_to_email', "
                                 "'customer_email', 'customer_phone', 'last_contact_date', 'product_interest', "
                                 "'status', 'notes', 'follow_up_by'")
        self._set("customer_relationship_manager", "customer_id", customer_id, field, new_value)
        return "Customer updated successfully."

    def customer_relationship_manager__add_customer(self, customer_name=None, assigned_to_email=None, status=None,
                                                    customer_email=None, customer_phone=None, last_contact_date=None,
                                                    product_interest=None, notes="", follow_up_by=None):
        if not all([customer_name, assigned_to_email, status]):
            raise WorkbenchError("Please provide all required fields: customer_name, assigned_to_email, status.")
        new_id = self._next_id("customer_relationship_manager", "customer_id")
        self._concat("customer_relationship_manager", {
            "customer_id": new_id, "customer_name": customer_name,
            "customer_email": customer_email.lower() if customer_email else customer_email,
            "customer_phone": customer_phone, "last_contact_date": last_contact_date,
            "product_interest": product_interest, "status": status, "assigned_to_email": assigned_to_email.lower(),
            "notes": notes, "follow_up_by": follow_up_by}, ignore_index=True)
        return new_id

    def customer_relationship_manager__delete_customer(self, customer_id=None):
        if not customer_id:
            raise WorkbenchError("Customer ID not provided.")
        if not self._matches("customer_relationship_manager", "customer_id", customer_id):
            raise WorkbenchError("Customer not found.")
        self._drop("customer_relationship_manager", "customer_id", customer_id)
        return "Customer deleted successfully."


def parsed_arguments(name: str, arguments) -> dict:
    """A call's arguments as the tool takes them (strings; None dropped): how a call is recorded."""
    return _arguments(TOOLS[name], arguments)


def replay(calls: list[dict], db: dict | None = None, seed: int = 0) -> tuple[Sandbox, list[tuple[bool, str]]]:
    """Run `calls` ({"name", "arguments"}) in order on a fresh sandbox; (the sandbox, (ok, text) per call).
    A refused call is reported and changes nothing, as in an episode (and as WorkBench's evaluation skips it)."""
    box, results = Sandbox(db, seed), []
    for c in calls:
        try:
            results.append((True, box.call(c["name"], c["arguments"])))
        except WorkbenchError as e:
            results.append((False, f"Error: {e}"))
    return box, results


def outcome_correct(gold: list[dict], calls: list[dict], db: dict | None = None, seed: int = 0) -> bool:
    """WorkBench's `is_correct`: `calls` leave the compared tables exactly as the gold calls do."""
    return replay(calls, db, seed)[0].state() == replay(gold, db, seed)[0].state()
