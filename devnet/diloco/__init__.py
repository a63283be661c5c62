"""The devnet's training pool (DiLoCo): its offline corpus and model (`corpus`), cheating workers
for drills and the detection matrix (`cheats`), and an in-process run without the market with its
single-node and data-parallel baselines (`simulate`).

Nothing is imported here: the CLI imports `cheats.TrainCheat` for an option's choices and must not
pay for torch.
"""
