// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @title IPoolToken
/// @notice The proofpool ERC20 ("Proofpool Token", POOL) with a devnet faucet role.
interface IPoolToken is IERC20 {
    /// @notice Creates `amount` tokens for `to`. Needs MINTER_ROLE. Emits {IERC20-Transfer} from address(0).
    /// @param to Receiver of the new tokens.
    /// @param amount Amount in the token's smallest unit (18 decimals).
    function mint(address to, uint256 amount) external;
}
