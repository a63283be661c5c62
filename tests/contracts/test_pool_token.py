"""PoolToken: ERC20 metadata, faucet minting by MINTER_ROLE, EIP-2612 permit."""

from __future__ import annotations

from eth_account.messages import encode_typed_data

from proofpool.infra.chain.artifacts import load_artifact
from tests.contracts.conftest import World
from tests.contracts.helpers import TOKEN, ZERO_ADDRESS, expect_revert


def test_metadata(world: World) -> None:
    token = world.c.token.functions
    assert token.name().call() == "Proofpool Token"
    assert token.symbol().call() == "POOL"
    assert token.decimals().call() == 18


def test_admin_holds_default_admin_and_devnet_minter(world: World) -> None:
    token = world.c.token
    for role in ("DEFAULT_ADMIN_ROLE", "MINTER_ROLE"):
        assert token.functions.hasRole(world.c.role(token, role), world.admin.address).call()


def test_mint_credits_receiver_and_emits_transfer(world: World) -> None:
    before = world.c.balance(world.outsider)
    receipt = world.admin.send(world.c.token.functions.mint(world.outsider.address, 5 * TOKEN))
    assert world.c.balance(world.outsider) == before + 5 * TOKEN
    assert world.c.event(receipt, "Transfer") == {
        "from": ZERO_ADDRESS,
        "to": world.outsider.address,
        "value": 5 * TOKEN,
    }


def test_granted_minter_can_mint(world: World) -> None:
    token = world.c.token
    world.admin.send(token.functions.grantRole(world.c.role(token, "MINTER_ROLE"), world.outsider.address))
    world.outsider.send(token.functions.mint(world.outsider.address, TOKEN))


def test_mint_without_role_reverts(world: World) -> None:
    token = world.c.token
    with expect_revert("AccessControlUnauthorizedAccount", world.outsider.address, world.c.role(token, "MINTER_ROLE")):
        world.outsider.send(token.functions.mint(world.outsider.address, TOKEN))


def test_constructor_refuses_zero_admin(world: World) -> None:
    with expect_revert("PoolTokenZeroAddress"):
        world.admin.sender.deploy(load_artifact("PoolToken"), ZERO_ADDRESS)


def test_permit_sets_allowance_from_owner_signature(world: World) -> None:
    token = world.c.token
    owner, spender = world.node1, world.outsider
    deadline = world.chain.timestamp() + 3600
    nonce = token.functions.nonces(owner.address).call()
    message = encode_typed_data(
        domain_data={
            "name": "Proofpool Token",
            "version": "1",
            "chainId": world.c.w3.eth.chain_id,
            "verifyingContract": token.address,
        },
        message_types={
            "Permit": [
                {"name": "owner", "type": "address"},
                {"name": "spender", "type": "address"},
                {"name": "value", "type": "uint256"},
                {"name": "nonce", "type": "uint256"},
                {"name": "deadline", "type": "uint256"},
            ]
        },
        message_data={
            "owner": owner.address,
            "spender": spender.address,
            "value": 7 * TOKEN,
            "nonce": nonce,
            "deadline": deadline,
        },
    )
    signed = owner.account.sign_message(message)
    fn = token.functions.permit(
        owner.address,
        spender.address,
        7 * TOKEN,
        deadline,
        signed.v,
        signed.r.to_bytes(32, "big"),
        signed.s.to_bytes(32, "big"),
    )
    receipt = spender.send(fn)
    assert token.functions.allowance(owner.address, spender.address).call() == 7 * TOKEN
    assert world.c.event(receipt, "Approval") == {
        "owner": owner.address,
        "spender": spender.address,
        "value": 7 * TOKEN,
    }
    with expect_revert("ERC2612InvalidSigner"):  # the nonce was consumed: a replay recovers another signer
        spender.send(fn)


def test_transfer_and_transfer_from_move_tokens(world: World) -> None:
    token = world.c.token.functions
    supply = token.totalSupply().call()
    world.provider.send(token.transfer(world.outsider.address, 3 * TOKEN))
    world.provider.send(token.approve(world.outsider.address, 2 * TOKEN))
    receipt = world.outsider.send(token.transferFrom(world.provider.address, world.node1.address, 2 * TOKEN))
    assert world.c.event(receipt, "Transfer") == {
        "from": world.provider.address,
        "to": world.node1.address,
        "value": 2 * TOKEN,
    }
    assert world.c.balance(world.node1) == 2 * TOKEN
    assert token.totalSupply().call() == supply


def test_transfer_beyond_balance_reverts(world: World) -> None:
    with expect_revert("ERC20InsufficientBalance", world.node1.address, 0, 1):
        world.node1.send(world.c.token.functions.transfer(world.outsider.address, 1))


def test_expired_permit_reverts(world: World) -> None:
    deadline = world.chain.timestamp() - 1
    fn = world.c.token.functions.permit(
        world.node1.address, world.outsider.address, 1, deadline, 27, b"\x01" * 32, b"\x01" * 32
    )
    with expect_revert("ERC2612ExpiredSignature", deadline):
        world.outsider.send(fn)


def test_domain_separator_matches_eip712_domain(world: World) -> None:
    token = world.c.token.functions
    fields = token.eip712Domain().call()
    assert fields[1:5] == ["Proofpool Token", "1", world.c.w3.eth.chain_id, world.c.book.pool_token]
    assert len(token.DOMAIN_SEPARATOR().call()) == 32
