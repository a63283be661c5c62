// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title HostileToken
/// @notice Test-only ERC20 that misbehaves on transfer: it either re-enters a target contract with
/// armed calldata (bubbling the target's revert) or returns false. Never deploy outside tests.
contract HostileToken is ERC20 {
    enum Mode {
        Honest,
        Reenter,
        ReturnFalse
    }

    Mode private _mode;
    address private _target;
    bytes private _payload;

    constructor() ERC20("Hostile", "HOST") {}

    /// @notice Mints freely (test token).
    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }

    /// @notice Sets how the next transfers misbehave.
    function arm(Mode mode, address target, bytes calldata payload) external {
        _mode = mode;
        _target = target;
        _payload = payload;
    }

    function transfer(address to, uint256 amount) public override returns (bool) {
        if (_mode == Mode.ReturnFalse) return false;
        if (_mode == Mode.Reenter) {
            _mode = Mode.Honest;
            (bool ok, bytes memory data) = _target.call(_payload);
            if (!ok) {
                assembly ("memory-safe") {
                    revert(add(data, 32), mload(data))
                }
            }
        }
        return super.transfer(to, amount);
    }
}
