"""Small varied chat data for the benchmarks: short instructions and facts of several kinds."""
import random

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Norway", "Oslo"), ("Greece", "Athens")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("happy", "sad"), ("strong", "weak"), ("early", "late")]
COLOURS = [("grass", "green"), ("the sky on a clear day", "blue"), ("snow", "white"), ("a ripe banana", "yellow")]
TASKS = ["Write one sentence about {x}.", "Give a short tip about {x}.", "Describe {x} in a few words.", "Why do people like {x}?"]
TOPICS = ["tea", "rain", "bicycles", "libraries", "gardens", "music", "the ocean", "mountains", "bread", "winter"]


def _qa(rng):
    k = rng.randrange(5)
    if k == 0: c, a = rng.choice(CAPITALS); return f"What is the capital of {c}?", f"The capital of {c} is {a}."
    if k == 1: w, o = rng.choice(OPPOSITES); return f"What is the opposite of {w}?", f"The opposite of {w} is {o}."
    if k == 2: t, c = rng.choice(COLOURS); return f"What colour is {t}?", f"{t[0].upper() + t[1:]} is {c}."
    if k == 3: x, y = rng.randrange(2, 20), rng.randrange(2, 20); return f"What is {x} plus {y}?", f"{x} plus {y} is {x + y}."
    t = rng.choice(TOPICS); return rng.choice(TASKS).format(x=t), f"{t[0].upper() + t[1:]} can make an ordinary day feel calmer and more interesting."


def chat_examples(n, seed=0):
    from gradian.data import Example
    rng = random.Random(seed)
    return [Example(f"ex{i}", [{"role": "user", "content": q}, {"role": "assistant", "content": a}]) for i, (q, a) in enumerate(_qa(rng) for _ in range(n))]


def eval_items(n, seed=1):
    "(prompt, correct answer, a wrong answer in the same format) triples."
    rng, out = random.Random(seed), []
    for i in range(n):
        c, a = CAPITALS[i % len(CAPITALS)]; w = CAPITALS[(i + 3) % len(CAPITALS)][1]
        out.append((f"What is the capital of {c}?", f"The capital of {c} is {a}.", f"The capital of {c} is {w}."))
    return out
