"""How official_verdicts.csv was made: WorkBench's own `is_correct` (src/evals/utils.py, commit 42f1b6dc) on its
GPT-4 'all tools' predictions, on the gold answers and on an empty response, for all 690 queries.

Run from a WorkBench checkout with pandas==2.1.4 (its requirements.txt) and `stubs/` on the path: stand-ins for
the langchain modules utils.py imports (`langchain.tools.tool` keeps each function as `.func` and its name;
the chat-model classes are unused here). Writes JSON; the tests keep the rows of their subset as CSV.
"""
import ast, csv, glob, json, sys
sys.path[:0] = ["stubs", "."]
import pandas as pd
from src.evals.utils import is_correct
out = []
for path in sorted(glob.glob("data/results/*/gpt-4_all_*.csv")):
    domain = path.split("/")[2]
    qa = pd.read_csv(f"data/processed/queries_and_answers/{domain}_queries_and_answers.csv", dtype=str)
    res = pd.read_csv(path, dtype=str).fillna("")
    gold = {q: ast.literal_eval(a) for q, a in zip(qa["query"], qa["answer"])}
    for i, r in res.iterrows():
        # as calculate_metrics does before is_correct: a newline in an action becomes the two characters \n
        g = [a.replace("\n", "\\n") for a in gold[r["query"]]]
        pred = [a.replace("\n", "\\n") for a in ast.literal_eval(r["function_calls"])]
        out.append({"domain": domain, "row": i, "query": r["query"],
                    "prediction": is_correct(pred, g, r["error"]), "gold": is_correct(g, g, ""),
                    "empty": is_correct([], g, "")})
json.dump(out, open(sys.argv[1], "w"))
import collections
print(len(out), collections.Counter((o["prediction"], o["gold"], o["empty"]) for o in out))
