"""WorkBench-style tasks from templates (a task family, `workbench`): a query, the gold tool calls, the domain.

Each template draws its slots (a colleague, a customer, a meeting, a date...) from the sandbox database and
computes the gold calls from what the database holds, as WorkBench's templates do: reads first (a search gives
the id a write needs; the directory gives an email address; a count decides a condition), then the writes. A
conditional template ("if ... then plot/book") has no write when its condition is false: doing nothing is the
right outcome there. Multi-domain templates chain domains (a customer's assignee gets a meeting; a task's
assignee an email), so the result of one call feeds the next.

A record (the record format of `sculptor_rl.records`):

    {"id": "workbench-train-s0-00003", "task": "workbench", "messages": [{"role": "user", "content": query}],
     "answer": [{"name": "calendar.search_events", "arguments": {...}}, ...],   # the gold calls
     "meta": {"domain": "calendar", "template": "calendar.delete_next_meeting", "split": "train",
              "database_seed": 0}}

Splits: a query's split is fixed by a hash of its text (`split_of`: one in four is `test`), so the same
templates with other slots are in both splits but no query text is; as the paper's memory/test split of
WorkBench (one query per template into memory, the rest tested).
`score(record, text)` parses the Hermes tool calls in `text` and runs WorkBench's outcome check on them.
"""

from __future__ import annotations

import hashlib
import random
from datetime import timedelta

from ...toolcalls import HermesParser, format_tool_call
from .sandbox import (BOARDS, LISTS, NOW, PEOPLE, PLOT_TYPES, PRODUCTS, STATUSES, Sandbox, email_of, outcome_correct,
                      start_database)

NAME = "workbench"
DOMAINS = ("analytics", "calendar", "customer_relationship_manager", "email", "project_management", "multi_domain")
SPLITS = ("train", "test")

__all__ = ["DOMAINS", "NAME", "SPLITS", "TEMPLATES", "generate", "render_answer", "score"]

TODAY = str(NOW.date())
TOMORROW = str(NOW.date() + timedelta(days=1))


def _c(tool, /, **arguments):
    return {"name": tool, "arguments": arguments}


def _first(name: str) -> str:
    return name.split()[0]


def _find(person: str) -> dict:
    return _c("company_directory.find_email_address", name=_first(person))


# ---- templates: (rng, sandbox) -> (query, gold calls) ----

def cal_delete_next(rng, box):
    person = rng.choice([p for p in PEOPLE if any(e["participant_email"] == email_of(p) and e["event_start"] >=
                                                  str(NOW) for e in box.db["calendar"])])
    events = box.calendar__search_events(query=_first(person).lower(), time_min=str(NOW))
    query = rng.choice(["Cancel my next meeting with {p}.", "Delete my next meeting with {p}.",
                        "Please remove the next meeting I have with {p} from my calendar."]).format(p=_first(person))
    return query, [_c("calendar.search_events", query=_first(person).lower(), time_min=str(NOW)),
                   _c("calendar.delete_event", event_id=events[0]["event_id"])]


def cal_rename(rng, box):
    event = rng.choice([e for e in box.db["calendar"] if e["event_start"] >= str(NOW)])
    new = rng.choice(["Sync", "Check-in", "Planning", "Review"]) + f" on {event['event_name']}"
    day = event["event_start"][:10]
    query = f"Rename the '{event['event_name']}' meeting on {day} to '{new}'."
    found = box.calendar__search_events(query=event["event_name"], time_min=f"{day} 00:00:00",
                                        time_max=f"{day} 23:59:59")
    return query, [_c("calendar.search_events", query=event["event_name"], time_min=f"{day} 00:00:00",
                      time_max=f"{day} 23:59:59"),
                   _c("calendar.update_event", event_id=found[0]["event_id"], field="event_name", new_value=new)]


def cal_book(rng, box):
    person, hour, minutes = rng.choice(PEOPLE), rng.randint(9, 16), rng.choice(["30", "60"])
    title = rng.choice(["Catch up", "Project sync", "1:1", "Design review"]) + f" with {_first(person)}"
    start = f"{TOMORROW} {hour:02d}:00:00"
    query = f"Book a {minutes}-minute meeting called '{title}' with {_first(person)} tomorrow at {hour:02d}:00."
    return query, [_find(person), _c("calendar.create_event", event_name=title, participant_email=email_of(person),
                                     event_start=start, duration=minutes)]


def mail_send(rng, box):
    person, topic = rng.choice(PEOPLE), rng.choice(["the budget", "the offsite", "the launch", "the audit"])
    subject, body = f"Question about {topic}", f"Hi {_first(person)}, can we talk about {topic} this week?"
    query = f"Email {_first(person)} with the subject '{subject}' and the text '{body}'"
    return query, [_find(person), _c("email.send_email", recipient=email_of(person), subject=subject, body=body)]


def mail_delete_latest(rng, box):
    person = rng.choice(sorted({e["sender/recipient"] for e in box.db["email"]}))
    name = person.split(".")[0]
    latest = box.email__search_emails(query=name)[0]
    query = rng.choice(["Delete my last email from {n}.", "Remove the most recent email I received from {n}."])
    return query.format(n=name.capitalize()), [_c("email.search_emails", query=name),
                                               _c("email.delete_email", email_id=latest["email_id"])]


def mail_forward(rng, box):
    email = rng.choice(box.db["email"])
    topic, to = email["subject"].removeprefix("Update on "), rng.choice(PEOPLE)
    latest = box.email__search_emails(query=topic)[0]
    query = f"Forward the latest email about '{topic}' to {_first(to)}."
    return query, [_c("email.search_emails", query=topic), _find(to),
                   _c("email.forward_email", email_id=latest["email_id"], recipient=email_of(to))]


def mail_reply(rng, box):
    person = rng.choice(sorted({e["sender/recipient"] for e in box.db["email"]}))
    name = person.split(".")[0]
    latest = box.email__search_emails(query=name)[0]
    body = rng.choice(["Thanks, looks great.", "Got it, I will follow up tomorrow.", "Can we discuss this Monday?"])
    query = f"Reply to {name.capitalize()}'s latest email saying '{body}'"
    return query, [_c("email.search_emails", query=name),
                   _c("email.reply_email", email_id=latest["email_id"], body=body)]


def an_plot(rng, box):
    since = str(NOW.date() - timedelta(days=rng.choice([7, 14, 30])))
    value, kind = rng.choice(["total_visits", "user_engaged", "session_duration_seconds"]), rng.choice(PLOT_TYPES)
    words = {"total_visits": "total visits", "user_engaged": "engaged users",
             "session_duration_seconds": "session duration"}[value]
    query = f"Make a {kind} chart of {words} since {since}."
    return query, [_c("analytics.create_plot", time_min=since, time_max=TODAY, value_to_plot=value, plot_type=kind)]


def an_conditional_plot(rng, box):
    weeks = rng.choice([1, 2, 4])
    since = str(NOW.date() - timedelta(weeks=weeks))
    counts = box.analytics__total_visits_count(time_min=since, time_max=TODAY)
    threshold = rng.choice(sorted(set(counts.values())) or [1]) + rng.choice([-1, 0, 1])
    query = (f"Were total visits more than {threshold} on any day in the last {weeks} week{'s' * (weeks > 1)}? "
             "If so, plot them as a line chart.")
    calls = [_c("analytics.total_visits_count", time_min=since, time_max=TODAY)]
    if any(v > threshold for v in counts.values()):
        calls.append(_c("analytics.create_plot", time_min=since, time_max=TODAY, value_to_plot="total_visits",
                        plot_type="line"))
    return query, calls


def crm_status(rng, box):
    customer = rng.choice(box.db["customer_relationship_manager"])
    status = rng.choice([s for s in STATUSES if s != customer["status"]])
    query = f"Change {customer['customer_name']}'s status to {status} in the CRM."
    return query, [_c("customer_relationship_manager.search_customers", customer_name=customer["customer_name"]),
                   _c("customer_relationship_manager.update_customer", customer_id=customer["customer_id"],
                      field="status", new_value=status)]


def crm_reassign(rng, box):
    customer = rng.choice(box.db["customer_relationship_manager"])
    to = rng.choice([p for p in PEOPLE if email_of(p) != customer["assigned_to_email"]])
    query = f"We're moving {customer['customer_name']} to {_first(to)}. Can you make that change in the CRM?"
    return query, [_c("customer_relationship_manager.search_customers", customer_name=customer["customer_name"]),
                   _find(to),
                   _c("customer_relationship_manager.update_customer", customer_id=customer["customer_id"],
                      field="assigned_to_email", new_value=email_of(to))]


def crm_add(rng, box):
    name = f"{rng.choice(['Alex', 'Robin', 'Sam', 'Kim', 'Noa'])} {rng.choice(['Young', 'Ward', 'Ellis', 'Grant'])}"
    owner, product = rng.choice(PEOPLE), rng.choice(PRODUCTS)
    query = f"Add {name} as a new lead in the CRM, interested in {product}, and assign them to {_first(owner)}."
    return query, [_find(owner), _c("customer_relationship_manager.add_customer", customer_name=name,
                                    assigned_to_email=email_of(owner), status="Lead", product_interest=product)]


def crm_delete(rng, box):
    customer = rng.choice(box.db["customer_relationship_manager"])
    query = f"Delete {customer['customer_name']} from the CRM."
    return query, [_c("customer_relationship_manager.search_customers", customer_name=customer["customer_name"]),
                   _c("customer_relationship_manager.delete_customer", customer_id=customer["customer_id"])]


def pm_move(rng, box):
    task = rng.choice(box.db["project_management"])
    to = rng.choice([lst for lst in LISTS if lst != task["list_name"]])
    query = f"Move the task '{task['task_name']}' to {to}."
    return query, [_c("project_management.search_tasks", task_name=task["task_name"]),
                   _c("project_management.update_task", task_id=task["task_id"], field="list_name", new_value=to)]


def _team(box) -> list[str]:
    """The colleagues a task can be given to: WorkBench's create/update_task take only the tasks' assignees."""
    assignees = {t["assigned_to_email"] for t in box.db["project_management"]}
    return [p for p in PEOPLE if email_of(p) in assignees]


def pm_create(rng, box):
    person, board = rng.choice(_team(box)), rng.choice(BOARDS)
    name = rng.choice(["Audit logs", "Write tests", "Clean up CSS", "Load test checkout", "Draft roadmap"])
    due = str(NOW.date() + timedelta(days=rng.choice([7, 14])))
    query = f"Create a task '{name}' on the {board} board for {_first(person)}, due {due}, in the Backlog."
    return query, [_find(person), _c("project_management.create_task", task_name=name,
                                     assigned_to_email=email_of(person), list_name="Backlog", due_date=due,
                                     board=board)]


def pm_reassign(rng, box):
    task = rng.choice(box.db["project_management"])
    to = rng.choice([p for p in _team(box) if email_of(p) != task["assigned_to_email"]])
    query = f"Give the task '{task['task_name']}' to {_first(to)}."
    return query, [_c("project_management.search_tasks", task_name=task["task_name"]), _find(to),
                   _c("project_management.update_task", task_id=task["task_id"], field="assigned_to_email",
                      new_value=email_of(to))]


def multi_crm_meeting(rng, box):
    customer = rng.choice(box.db["customer_relationship_manager"])
    days, hour = rng.choice([7, 14, 21]), rng.randint(9, 16)
    name = customer["customer_name"]
    query = (f"If we haven't contacted {name} in the past {days} days, book a 30-minute meeting called "
             f"'Update on {name}' with whoever is assigned to them tomorrow at {hour:02d}:00.")
    calls = [_c("customer_relationship_manager.search_customers", customer_name=name)]
    if customer["last_contact_date"] < str(NOW.date() - timedelta(days=days)):
        calls.append(_c("calendar.create_event", event_name=f"Update on {name}",
                        participant_email=customer["assigned_to_email"], event_start=f"{TOMORROW} {hour:02d}:00:00",
                        duration="30"))
    return query, calls


def multi_task_email(rng, box):
    task = rng.choice(box.db["project_management"])
    subject = f"Update on {task['task_name']}"
    body = "Could you send me a short status update on this task?"
    query = f"Email whoever is assigned to '{task['task_name']}' with the subject '{subject}' and the text '{body}'"
    return query, [_c("project_management.search_tasks", task_name=task["task_name"]),
                   _c("email.send_email", recipient=task["assigned_to_email"], subject=subject, body=body)]


def multi_email_meeting(rng, box):
    email = rng.choice(box.db["email"])
    topic, hour = email["subject"].removeprefix("Update on "), rng.randint(9, 16)
    latest = box.email__search_emails(query=topic)[0]
    query = (f"Book a 30-minute meeting called '{topic} follow-up' tomorrow at {hour:02d}:00 with the sender of "
             f"my latest email about '{topic}'.")
    return query, [_c("email.search_emails", query=topic),
                   _c("calendar.create_event", event_name=f"{topic} follow-up",
                      participant_email=latest["sender/recipient"],
                      event_start=f"{TOMORROW} {hour:02d}:00:00", duration="30")]


TEMPLATES = {
    "analytics": [an_plot, an_conditional_plot],
    "calendar": [cal_delete_next, cal_rename, cal_book],
    "customer_relationship_manager": [crm_status, crm_reassign, crm_add, crm_delete],
    "email": [mail_send, mail_delete_latest, mail_forward, mail_reply],
    "project_management": [pm_move, pm_create, pm_reassign],
    "multi_domain": [multi_crm_meeting, multi_task_email, multi_email_meeting],
}


def generate(num: int, seed: int = 0, split: str = "train", domains: str | list[str] = "all",
             database_seed: int = 0) -> list[dict]:
    """`num` tasks, templates taken in turn across `domains` ("all", or names from DOMAINS), slots drawn per task;
    `split` train/test draws disjoint instances."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    chosen = list(DOMAINS) if domains == "all" else [d.strip() for d in (
        domains.split(",") if isinstance(domains, str) else domains)]
    bad = [d for d in chosen if d not in TEMPLATES]
    if bad or not chosen:
        raise ValueError(f"unknown domain {bad[0] if bad else ''!r}; choose from {', '.join(DOMAINS)}")
    # in turn across the domains (a domain's first template, the next domain's first, ...): any num covers them all
    templates = [(d, TEMPLATES[d][i]) for i in range(max(map(len, TEMPLATES.values()))) for d in chosen
                 if i < len(TEMPLATES[d])]
    out, box = [], Sandbox(seed=database_seed)  # templates only read it
    for i in range(num):
        domain, template = templates[i % len(templates)]
        rng = random.Random(f"workbench-{seed}-{split}-{i}")
        for _ in range(1000):  # draw slots until the query falls in this split
            query, calls = template(rng, box)
            if split_of(query) == split:
                break
        else:
            raise RuntimeError(f"template {template.__name__} drew no {split} query in 1000 tries")
        out.append({"id": f"workbench-{split}-s{seed}-{i:05d}", "task": NAME,
                    "messages": [{"role": "user", "content": query}], "answer": calls,
                    "meta": {"domain": domain, "template": f"{domain}.{template.__name__}", "split": split,
                             "database_seed": database_seed}})
    return out


def split_of(query: str) -> str:
    """The split a query belongs to (a hash of its text: one in four is held out for test), so no query text
    is in both splits even where a template's slots repeat."""
    return "test" if hashlib.sha256(query.encode()).digest()[0] % 4 == 0 else "train"


def calls_of(text: str) -> list[dict]:
    """The well-formed tool calls in a completion's text, in order."""
    return [{"name": c.name, "arguments": c.arguments} for c in HermesParser().parse(text).calls
            if c.name and isinstance(c.arguments, dict)]


def score(record: dict, response: str | list[dict]) -> float:
    """1.0 when the calls (a list, or the Hermes calls in a text) give the gold outcome, else 0.0."""
    calls = calls_of(response) if isinstance(response, str) else response
    return float(outcome_correct(record["answer"], calls, start_database(record.get("meta") or {})))


def render_answer(answer: list[dict]) -> str:
    """The gold calls as one completion of Hermes tool calls (scores 1.0)."""
    return "\n".join(format_tool_call(c["name"], c["arguments"]) for c in answer)
