# Excerpt of THUDM/LongBench `pred.py` at commit 2e00731f8d0bff23dc4325161044d0ed8af94c1e (MIT, LICENSE beside it):
# the 0-shot prompt's filling (its line 93, verbatim, inside a function here) and `extract_answer` (lines 58-68,
# verbatim). Nothing else of the file is kept: it calls a model through an OpenAI client.
import re
from pathlib import Path

template_0shot = open(Path(__file__).parent / '0shot.txt', encoding='utf-8').read()


def fill_0shot(item, context):
    template = template_0shot
    prompt = template.replace('$DOC$', context.strip()).replace('$Q$', item['question'].strip()).replace('$C_A$', item['choice_A'].strip()).replace('$C_B$', item['choice_B'].strip()).replace('$C_C$', item['choice_C'].strip()).replace('$C_D$', item['choice_D'].strip())
    return prompt


def extract_answer(response):
    response = response.replace('*', '')
    match = re.search(r'The correct answer is \(([A-D])\)', response)
    if match:
        return match.group(1)
    else:
        match = re.search(r'The correct answer is ([A-D])', response)
        if match:
            return match.group(1)
        else:
            return None
