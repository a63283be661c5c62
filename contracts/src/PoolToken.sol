// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

/// @title PoolToken
/// @notice "Proofpool Token" (POOL): ERC20 with EIP-2612 permit. Stake, pool budgets and rewards are
/// paid in it. MINTER_ROLE is the devnet faucet; on a production chain nobody holds it after launch.
contract PoolToken is ERC20, ERC20Permit, AccessControl {
    /// @notice Role allowed to mint.
    bytes32 public constant MINTER_ROLE = keccak256("MINTER_ROLE");

    /// @notice A zero admin was given.
    error PoolTokenZeroAddress();

    /// @param admin Receives DEFAULT_ADMIN_ROLE (grants MINTER_ROLE).
    constructor(address admin) ERC20("Proofpool Token", "POOL") ERC20Permit("Proofpool Token") {
        if (admin == address(0)) revert PoolTokenZeroAddress();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
    }

    /// @notice Creates `amount` tokens for `to`. Needs MINTER_ROLE. Emits {Transfer} from address(0).
    /// @param to Receiver of the new tokens.
    /// @param amount Amount in the token's smallest unit (18 decimals).
    function mint(address to, uint256 amount) external onlyRole(MINTER_ROLE) {
        _mint(to, amount);
    }
}
