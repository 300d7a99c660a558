# `grade` of the openai/mrcr dataset card (huggingface.co/datasets/openai/mrcr, README "How to run"; the dataset is
# MIT-licensed), verbatim. The card is on the Hugging Face hub, out of this machine's reach: the function was
# read from public repositories that quote it unchanged (see PROVENANCE.md).
from difflib import SequenceMatcher


def grade(response, answer, random_string_to_prepend) -> float:
    """
    Compare response and answer.
    """
    if not response.startswith(random_string_to_prepend):
        return 0
    response = response.removeprefix(random_string_to_prepend)
    answer = answer.removeprefix(random_string_to_prepend)
    return float(SequenceMatcher(None, response, answer).ratio())
