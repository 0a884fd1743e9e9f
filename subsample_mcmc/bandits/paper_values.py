"""Published numbers the reproductions are checked against.

``MAES_TABLE1_UNTUNED[distribution][policy][T]``: mean expected regret of the untuned
generic policies, Table 1 of Maes, Wehenkel & Ernst (two arms, means uniform on [0, 1];
10,000 test problems x 100 runs each).  ``distribution`` is ``"bernoulli"`` or
``"gaussian"`` (truncated to [0, 1]).  Policy keys are ``parse_policy`` strings.

``MAES_TABLE1_LEARNED``: the learned/tuned policies' regrets for the same T they were
trained on (the diagonal of Table 1), and ``MAES_TABLE2_WINS``: percentage of test
problems on which a policy beats UCB1-Tuned (Table 2).
"""

MAES_TABLE1_UNTUNED = {
    "bernoulli": {
        "ucb1": {10: 1.07, 100: 5.57, 1000: 20.1},
        "ucb1_tuned": {10: 0.75, 100: 2.28, 1000: 5.43},
        "ucb1_normal": {10: 1.71, 100: 13.1, 1000: 31.7},
        "ucb2": {10: 0.97, 100: 3.13, 1000: 7.26},
        "ucb_v": {10: 1.45, 100: 8.59, 1000: 25.5},
        "kl_ucb": {10: 0.76, 100: 2.47, 1000: 6.61},
        "kl_ucb:c=3": {10: 0.82, 100: 3.29, 1000: 9.81},
        "eps_greedy": {10: 1.07, 100: 3.21, 1000: 11.5},
    },
    "gaussian": {
        "ucb1": {10: 1.37, 100: 10.6, 1000: 66.7},
        "ucb1_tuned": {10: 1.09, 100: 6.62, 1000: 37.0},
        "ucb1_normal": {10: 1.65, 100: 13.4, 1000: 58.8},
        "ucb2": {10: 1.28, 100: 7.90, 1000: 40.1},
        "ucb_v": {10: 1.55, 100: 12.3, 1000: 63.4},
        "kl_ucb": {10: 1.14, 100: 7.66, 1000: 43.8},
        "kl_ucb:c=3": {10: 1.21, 100: 8.90, 1000: 53.0},
        "eps_greedy": {10: 1.20, 100: 6.24, 1000: 41.4},
    },
}

# tuned generic policies (parameters found by Alg. 2 for the training horizon T)
MAES_TABLE1_TUNED = {
    10: {"ucb1:C=0.170": (0.74, 1.05), "ucb_v:c=1.542:zeta=0.0631": (0.75, 1.01),
         "kl_ucb:c=-1.21": (0.73, 1.12), "eps_greedy:c=0.0499:d=1.505": (0.79, 1.01)},
    100: {"ucb1:C=0.173": (2.05, 6.06), "ucb_v:c=1.681:zeta=0.0347": (2.28, 5.30),
          "kl_ucb:c=-1.82": (2.10, 6.48), "eps_greedy:c=1.096:d=1.349": (3.19, 6.38)},
    1000: {"ucb1:C=0.187": (4.91, 33.0), "ucb_v:c=1.304:zeta=0.0852": (5.14, 27.5),
           "kl_ucb:c=-1.84": (5.12, 35.4), "eps_greedy:c=0.845:d=0.738": (9.93, 37.7)},
}

# (bernoulli, gaussian) regret of learned policies at their training horizon
MAES_TABLE1_LEARNED = {
    "power1": {10: (0.72, 0.97), 100: (1.84, 5.13), 1000: (4.04, 28.2)},
    "power2": {10: (0.72, 0.97), 100: (1.82, 5.03), 1000: (3.95, 27.3)},
    "formula1": {10: (0.72, 0.96), 100: (1.85, 5.07), 1000: (4.16, 26.4)},
    "formula2": {10: (0.72, 1.02), 100: (1.92, 5.22), 1000: (4.29, 26.1)},
}

# Table 1 formulas (index of arm k with rbar, sigma, t_k, t)
MAES_FORMULAS = {
    10: ("sqrt(t_k) * (rbar - 1/2)", "abs(rbar - 1/(t_k + t))"),
    100: ("rbar + 1/(t_k + 1/2)", "rbar + min(1/t_k, log(2))"),
    1000: ("rbar + 3/(t_k + 2)", "1/t_k - 1/(rbar - 2)"),
}

MAES_TABLE2_WINS = {
    "ucb1": {10: 48.1, 100: 78.1, 1000: 83.1},
    "ucb2": {10: 12.7, 100: 6.8, 1000: 6.8},
    "ucb_v": {10: 38.3, 100: 57.2, 1000: 49.6},
    "kl_ucb": {10: 50.5, 100: 65.0, 1000: 67.0},
    "eps_greedy": {10: 37.5, 100: 14.1, 1000: 10.7},
    "power1": {10: 54.6, 100: 82.3, 1000: 91.3},
    "power2": {10: 54.2, 100: 84.6, 1000: 90.3},
    "formula1": {10: 61.7, 100: 76.8, 1000: 88.1},
    "formula2": {10: 61.0, 100: 80.0, 1000: 73.1},
}

# Maes et al.: 10,000 test problems x 100 runs
MAES_TEST_PROBLEMS = 10_000
