# From open-compass/opencompass at commit a5acc4bba3b658f151617a3b393602110fb7a740 (Apache-2.0, LICENSE beside it),
# unchanged: `last_boxed_only_string`, `remove_boxed` and `extract_boxed_answer` of opencompass/datasets/math.py;
# `clean_atc_answer`, `needlebench_atc_postprocess_v2` and `NeedleBenchATCEvaluator` of
# opencompass/datasets/needlebench_v2/atc_elder_only.py (its registry decorators and base class left out).
import re


class BaseEvaluator:
    pass


def last_boxed_only_string(string):
    idx = string.rfind('\\boxed')
    if idx < 0:
        idx = string.rfind('\\fbox')
        if idx < 0:
            return None

    i = idx
    right_brace_idx = None
    num_left_braces_open = 0
    while i < len(string):
        if string[i] == '{':
            num_left_braces_open += 1
        if string[i] == '}':
            num_left_braces_open -= 1
            if num_left_braces_open == 0:
                right_brace_idx = i
                break
        i += 1

    if right_brace_idx is None:
        retval = None
    else:
        retval = string[idx:right_brace_idx + 1]

    return retval


def remove_boxed(s):
    left = '\\boxed{'
    try:
        assert s[:len(left)] == left
        assert s[-1] == '}'
        return s[len(left):-1]
    except Exception:
        return None


def extract_boxed_answer(pred_str, strip_double_curly_brace=False):
    boxed_str = last_boxed_only_string(pred_str)
    if boxed_str is None:
        return None
    answer = remove_boxed(boxed_str)
    if answer is None:
        return None
    if strip_double_curly_brace:
        match = re.match('^\{(.*)\}$', answer)  # noqa: W605
        if match:
            answer = match.group(1)
    return answer


def clean_atc_answer(text: str) -> str:
    """Clean answer format specifically for QwQ-32B-Preview model.

    Args:
        text: Raw prediction text

    Returns:
        Standardized name format after cleaning
    """
    if not text or text == 'None':
        return 'None'

    # Remove LaTeX commands but keep content
    text = re.sub(r'\\text\{([^}]+)\}', r'\1', text)
    text = re.sub(r'\\boxed\{([^}]+)\}', r'\1', text)
    text = re.sub(r'\\[\[\]]', '', text)

    # Remove extra backslashes
    text = text.replace('\\\\', '').replace('\\', '')

    # Handle extra spaces
    text = re.sub(r'\s+', ' ', text).strip()

    # Remove quotes
    text = text.replace('"', '').replace("'", '')
    # Remove tildes (波浪符号)
    text = text.replace('~', ' ')

    return text


def needlebench_atc_postprocess_v2(text: str) -> str:

    cand_ans = extract_boxed_answer(text, strip_double_curly_brace=True)

    if cand_ans:
        return clean_atc_answer(cand_ans)
    return 'None'


class NeedleBenchATCEvaluator(BaseEvaluator):

    def score(self, predictions, gold):
        if len(predictions) != len(gold):
            return {'error': 'predictions and gold have different lengths'}

        correct_count = 0
        details = []

        for prediction, reference in zip(predictions, gold):
            reference_name = reference
            if prediction.strip() == reference_name.strip():
                correct_count += 1

            detail = {
                'pred': prediction,
                'answer': reference_name,
                'correct': prediction.strip() == reference_name.strip()
            }
            details.append(detail)

        accuracy = (correct_count /
                    len(predictions)) * 100 if predictions else 0
        result = {'score': accuracy, 'details': details}
        return result
