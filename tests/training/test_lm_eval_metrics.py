

def test_the_gsm8k_cot_zeroshot_config_sends_lm_evals_prompt_as_one_user_turn(tmp_path: Path) -> None:
    from teamplay.config import EvalConfig, load_config
    from teamplay.envs.protocols import get_protocol
    from teamplay.training.setup import env_factory

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(EvalConfig, root / "configs" / "eval" / "gsm8k_cot_zeroshot.yaml", [])
    assert (cfg.task.name, cfg.task.split, cfg.samples, cfg.sampling.temperature, cfg.sampling.max_new_tokens) == (
        "gsm8k", "test", 1, 0.0, 256)
    protocol = get_protocol(str(root / cfg.protocol.name))
    make_env, _ = env_factory(get_task("gsm8k"), cfg.protocol.model_copy(update={"name": str(root / cfg.protocol.name)}),
                              cfg.team)
    env = make_env()
    env.reset(options={"item": ITEM})
    request = env.infos[env.agent_selection]["request"] if "request" in env.infos[env.agent_selection] else None
    if request is None:  # the env exposes the request through the protocol
        from teamplay.envs.protocols.base import ProtocolState
        state = ProtocolState(item=ITEM, team=env.team, answer_instruction=get_task("gsm8k").answer_instruction)
        request = protocol.build_request(state, protocol.schedule(env.team)[0])
    assert [(m.role, m.content) for m in request.chat] == [
        ("user", "Q: Janet's ducks ...\nA: Let's think step by step.")]
