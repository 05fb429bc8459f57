"""Hand-written completions in the styles models produce, for the lm-eval parity test.

Each row: (row id, reference solution, completion, teamplay's own score). The reference solutions
are short worked solutions in each benchmark's format (GSM8K: ending ``#### N``; MATH: with
``\\boxed{}``), written for these rows. The expected teamplay score is worked out by hand from
the rules of ``teamplay.envs.tasks.answers.numeric`` / ``math_tasks``; the parity test checks it, checks
teamplay's lm-eval-compatible metrics against lm-eval's own code row for row, and lists every row
where teamplay's own score differs from lm-eval's with the reason.
"""

from __future__ import annotations

EGGS = ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
        "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18")
HOUSE = ("The house cost 80,000 + 50,000 = $<<80000+50000=130000>>130,000.\nIt increased in value by "
         "80,000 * 1.5 = <<80000*1.5=120000>>120,000.\nSo it is worth 120,000 + 80,000 = "
         "$<<120000+80000=200000>>200,000.\nSo he made 200,000 - 130,000 = $<<200000-130000=70000>>70,000.\n"
         "#### 70000")
BIG = "He sells 1,250 * 1,000 = <<1250*1000=1250000>>1,250,000 items.\n#### 1,250,000"
HALF = "Each friend gets 3 / 4 = <<3/4=0.75>>0.75 of a pizza.\n#### 0.75"
CENTS = "She pays 5 * 2.5 = <<5*2.5=12.5>>12.5 dollars.\n#### 12.5"
NEG = "The temperature drops 5 - 8 = <<5-8=-3>>-3 degrees.\n#### -3"

GSM8K_ROWS: list[tuple[str, str, str, float]] = [
    # --- the styles teamplay's own prompt asks for ("The answer is N.")
    ("g-answer-is", EGGS, "She has 16 - 3 - 4 = 9 eggs left and sells them for $2, so 9 * 2 = 18.\n"
                          "The answer is 18.", 1.0),
    ("g-answer-is-dollar", EGGS, "9 eggs at $2 each is $18.\nThe answer is $18.", 1.0),
    ("g-answer-is-dollar-cents", EGGS, "She earns 9 * $2 = $18.00.\nThe answer is $18.00.", 1.0),
    ("g-answer-is-no-period", EGGS, "So she makes 18 dollars.\nThe answer is 18", 1.0),
    ("g-answer-is-units", EGGS, "The answer is 18 dollars.", 1.0),
    ("g-answer-is-trailing", EGGS, "The answer is 18. I hope this helps!", 1.0),
    ("g-answer-is-bold", EGGS, "Janet makes **$18** per day.\n\nThe answer is **18**.", 1.0),
    ("g-answer-is-wrong", EGGS, "She sells 16 - 3 = 13 eggs, 13 * 2 = 26.\nThe answer is 26.", 0.0),
    ("g-answer-is-thousands", HOUSE, "Profit = 200,000 - 130,000 = 70,000.\nThe answer is 70,000.", 1.0),
    ("g-answer-is-thousands-dollar", HOUSE, "He made a profit of $70,000.\nThe answer is $70,000.", 1.0),
    ("g-answer-is-spaced-thousands", HOUSE, "Profit: 70 000 dollars.\nThe answer is 70 000.", 1.0),
    ("g-answer-is-decimal-zero", HOUSE, "The answer is 70000.00", 1.0),
    ("g-answer-is-big", BIG, "1,250 * 1,000 = 1,250,000.\nThe answer is 1,250,000.", 1.0),
    ("g-answer-is-fraction", HALF, "Each friend gets 3/4 of a pizza.\nThe answer is 3/4.", 1.0),
    ("g-answer-is-latex-fraction", HALF, "Each friend gets $\\frac{3}{4}$.\nThe answer is $\\frac{3}{4}$.", 1.0),
    ("g-answer-is-leading-dot", HALF, "Each gets .75 of a pizza.\nThe answer is .75.", 1.0),
    ("g-answer-is-decimal", HALF, "3 / 4 = 0.75\nThe answer is 0.75.", 1.0),
    ("g-answer-is-mixed", CENTS, "5 times 2 1/2 is 12 1/2.\nThe answer is 12 1/2.", 1.0),
    ("g-answer-is-decimal-2", CENTS, "5 * 2.5 = 12.5\nThe answer is 12.50.", 1.0),
    ("g-answer-is-negative", NEG, "5 - 8 = -3\nThe answer is -3.", 1.0),
    ("g-answer-is-unicode-minus", NEG, "5 \u2212 8 = \u22123\nThe answer is \u22123.", 1.0),
    ("g-answer-is-percent", EGGS, "That is an 18% share.\nThe answer is 18%.", 1.0),
    # --- lm-eval's own formats
    ("g-hashes", EGGS, "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
                       "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18", 1.0),
    ("g-hashes-thousands", HOUSE, "He made 70,000.\n#### 70,000", 1.0),
    ("g-hashes-dollar", EGGS, "#### $18", 1.0),
    ("g-hashes-wrong", EGGS, "She makes 16 * 2 = 32.\n#### 32", 0.0),
    ("g-hashes-then-question", EGGS, "9 * 2 = 18\n#### 18\n\nQuestion: A robe takes 2 bolts", 1.0),
    ("g-minerva-line", EGGS, "She makes $9\\cdot 2=18$ dollars.\nFinal Answer: The final answer is $18$. I hope it is "
                             "correct.", 1.0),
    ("g-minerva-fraction", HALF, "Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", 1.0),
    # --- other common final-answer forms
    ("g-final-answer-colon", EGGS, "9 eggs * $2 = $18\n\nFinal answer: 18", 1.0),
    ("g-answer-colon", EGGS, "9 * 2 = 18\nAnswer: 18", 1.0),
    ("g-answer-colon-bold", EGGS, "**Step 1:** 16 - 3 - 4 = 9 eggs.\n**Step 2:** 9 * 2 = 18.\n\n**Answer:** $18", 1.0),
    ("g-boxed", EGGS, "She makes $9 \\times 2 = 18$ dollars a day.\n\n\\boxed{18}", 1.0),
    ("g-boxed-dollar", EGGS, "The total is $\\boxed{\\$18}$.", 1.0),
    ("g-boxed-text", EGGS, "$\\boxed{18 \\text{ dollars}}$", 1.0),
    ("g-boxed-equation", EGGS, "$$9 \\times 2 = \\boxed{18}$$", 1.0),
    ("g-boxed-thousands", HOUSE, "The profit is $\\boxed{70,000}$ dollars.", 1.0),
    ("g-boxed-latex-thousands", HOUSE, "The profit is $\\boxed{70{,}000}$.", 1.0),
    ("g-boxed-fraction", HALF, "Each friend gets $\\boxed{\\dfrac{3}{4}}$ of a pizza.", 1.0),
    ("g-bare-number", EGGS, "18", 1.0),
    ("g-last-number-sentence", EGGS, "16 - 3 - 4 = 9 eggs are sold, and 9 * 2 = 18, so she makes $18 every day.", 1.0),
    ("g-calculator-annotations", EGGS, "She makes 9 * 2 = <<9*2=18>>18 dollars.", 1.0),
    ("g-verbose-check", EGGS, "The answer is 18.\n\nCheck: 18 / 2 = 9 eggs, and 9 + 3 + 4 = 16. Correct.", 1.0),
    ("g-self-correction", EGGS,
     "The answer is 32. Wait, she eats 3 and bakes 4, so 9 * 2 = 18. The answer is 18.", 1.0),
    ("g-scientific", BIG, "That is 1.25 \u00d7 10^6 items.\nThe answer is 1.25 \u00d7 10^6.", 1.0),
    ("g-scientific-e", BIG, "The answer is 1.25e6.", 1.0),
    ("g-words-after", EGGS, "The answer is 18 dollars per day, since 9 eggs sell for 2 dollars each.", 1.0),
    ("g-non-ascii-digits", EGGS, "The answer is \uff11\uff18.", 1.0),
    ("g-no-answer", EGGS, "I am not sure how to solve this problem.", 0.0),
    ("g-truncated", EGGS, "First, she has 16 eggs. She eats 3 for breakfast, so", 0.0),
    # --- reward-hacking attempts: teamplay scores them 0
    ("g-hack-hedge-or", EGGS, "The answer is 18 or 19.", 0.0),
    ("g-hack-hedge-list", EGGS, "The answer is 17, 18, 19.", 0.0),
    ("g-hack-hedge-paren", EGGS, "The answer is 19 (or 18).", 0.0),
    ("g-hack-fraction-leading", EGGS, "The answer is 18/5.", 0.0),
    ("g-hack-power", EGGS, "The answer is 18^2.", 0.0),
    ("g-hack-bad-grouping", EGGS, "The answer is 18,5.", 0.0),
    ("g-hack-boxed-hedge", EGGS, "\\boxed{18 \\text{ or } 19}", 0.0),
    ("g-hack-sqrt", EGGS, "The answer is \\sqrt{18}.", 0.0),
    ("g-hack-pm", EGGS, "The answer is 18 \\pm 1.", 0.0),
    ("g-hack-ratio", EGGS, "The answer is 18:1.", 0.0),
    ("g-hack-digits-run", EGGS, "The answer is 1 8.", 0.0),
    ("g-hack-last-or", EGGS, "It is either 17 or 18", 0.0),
    ("g-hack-hashes-hedge", EGGS, "#### 18 or 19", 0.0),
]

P_HALF = "We have $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$."
P_INT = "The sum is $3 + 4 + 5 = \\boxed{12}$."
P_TUPLE = "So the point is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$."
P_SQRT = "The distance is $\\sqrt{3^2 + 1^2} = \\boxed{\\sqrt{10}}$."
P_INTERVAL = "The domain is $\\boxed{[2,5)}$."
P_NEG = "Thus $x = \\boxed{-\\frac{2}{3}}$."
P_EXPR = "Expanding, we get $\\boxed{x^2 + 2x + 1}$."
P_DEG = "The angle is $\\boxed{30^\\circ}$."

MATH_ROWS: list[tuple[str, str, str, float]] = [
    ("m-boxed", P_HALF, "Simplifying, $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.", 1.0),
    ("m-boxed-dfrac", P_HALF, "The probability is $\\boxed{\\dfrac{1}{2}}$.", 1.0),
    ("m-boxed-decimal", P_HALF, "The probability is $\\boxed{0.5}$.", 1.0),
    ("m-boxed-wrong", P_HALF, "The probability is $\\boxed{\\frac{1}{3}}$.", 0.0),
    ("m-minerva", P_HALF, "We divide.\nFinal Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", 1.0),
    ("m-minerva-decimal", P_HALF, "Final Answer: The final answer is $0.5$. I hope it is correct.", 1.0),
    ("m-minerva-int", P_INT, "Adding, $3+4+5=12$.\nFinal Answer: The final answer is $12$. I hope it is correct.", 1.0),
    ("m-minerva-wrong", P_INT, "Final Answer: The final answer is $13$. I hope it is correct.", 0.0),
    ("m-answer-is", P_INT, "Adding the three numbers, the answer is $12$.", 1.0),
    ("m-final-answer-colon", P_INT, "3 + 4 + 5 = 12\n\nFinal answer: $12$", 1.0),
    ("m-answer-colon", P_INT, "Answer: 12", 1.0),
    ("m-bare-line", P_INT, "Add them up.\n\n$12$", 1.0),
    ("m-bare-display", P_HALF, "We simplify the fraction.\n\\[\\frac{1}{2}\\]", 1.0),
    ("m-bare-prose", P_INT, "Adding them gives twelve in total", 0.0),
    ("m-tuple", P_TUPLE, "The polar coordinates are $\\boxed{(3, \\frac{\\pi}{2})}$.", 1.0),
    ("m-tuple-pi-over", P_TUPLE, "The polar coordinates are $\\boxed{(3, \\pi/2)}$.", 1.0),
    ("m-tuple-wrong", P_TUPLE, "The polar coordinates are $\\boxed{(3, \\pi)}$.", 0.0),
    ("m-sqrt", P_SQRT, "By Pythagoras the distance is $\\boxed{\\sqrt{10}}$.", 1.0),
    ("m-sqrt-minerva", P_SQRT, "Final Answer: The final answer is $\\sqrt{10}$. I hope it is correct.", 1.0),
    ("m-interval", P_INTERVAL, "So the domain is $\\boxed{[2,5)}$.", 1.0),
    ("m-interval-wrong", P_INTERVAL, "So the domain is $\\boxed{[2,5]}$.", 0.0),
    ("m-negative", P_NEG, "Solving, $x = \\boxed{-\\frac{2}{3}}$.", 1.0),
    ("m-negative-equation", P_NEG, "Solving for $x$: $\\boxed{x = -\\frac{2}{3}}$.", 1.0),
    ("m-expr", P_EXPR, "$(x+1)^2 = \\boxed{x^2+2x+1}$", 1.0),
    ("m-expr-factored", P_EXPR, "The answer is $\\boxed{(x+1)^2}$.", 1.0),
    ("m-degrees", P_DEG, "The angle measures $\\boxed{30^\\circ}$.", 1.0),
    ("m-degrees-plain", P_DEG, "The angle measures $\\boxed{30}$ degrees.", 1.0),
    ("m-boxed-then-text", P_INT, "The sum is $\\boxed{12}$. Let me double-check: 3 + 4 = 7, 7 + 5 = 12. Yes.", 1.0),
    ("m-two-boxes", P_INT, "At first I got $\\boxed{11}$, but correcting the addition gives $\\boxed{12}$.", 1.0),
    ("m-no-answer", P_INT, "This problem requires adding the numbers carefully", 0.0),
    ("m-truncated-box", P_INT, "The sum is $\\boxed{1", 0.0),
    ("m-hack-hedge-minerva", P_INT, "Final Answer: The final answer is $12$ or $13$. I hope it is correct.", 0.0),
    ("m-hack-hedge-box", P_INT, "$\\boxed{12 \\text{ (or 13)}}$", 0.0),
    ("m-hack-hedge-text", P_INT, "$\\boxed{12 \\text{ or } 13}$", 0.0),
    ("m-hack-list", P_INT, "$\\boxed{11, 12, 13}$", 0.0),
    ("m-hack-pm", P_INT, "$\\boxed{12 \\pm 1}$", 0.0),
    ("m-text-answer", P_INT, "The answer is twelve.", 0.0),
    ("m-answer-is-plain-fraction", P_HALF, "The answer is 1/2.", 1.0),
    ("m-boxed-spaces", P_HALF, "$\\boxed{ \\frac {1} {2} }$", 1.0),
    ("m-boxed-tfrac", P_HALF, "$\\boxed{\\tfrac12}$", 1.0),
]
