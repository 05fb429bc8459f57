"""Federated team training on Flower (optional extra: ``pip install 'teamplay[federated]'``).

Sites hold private shards and train the team's LoRA adapters with the ordinary Trainer; only
adapter updates and scalar reward statistics leave a site. Modules:

    aggregation    FedAvg, Fed-GRPO's mechanisms and the robust rules, as pure array functions
    partition      IID and non-IID shards
    wire           the flat adapter vector and what a reply may hold
    screen         the server's checks of each site result before it is aggregated
    client         the ClientApp: one site's round
    team_strategy  the round policy (a Flower Strategy): what each site is asked, what replies make
    server         the ServerApp: drives the strategy's rounds; evaluation, checkpoints, resume
    run            ``teamplay federate``: Flower's simulation engine on this machine
"""
