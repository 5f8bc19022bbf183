//! Windows processor groups (KEP-4885).
//!
//! Windows addresses a logical processor as (processor group, index within the group), with
//! at most 64 processors per group. KEP-4885 maps that pair onto the single CPU id the CPU
//! manager uses as `id = group * 64 + index`, so that a `CpuSet` of ids can express any
//! processor of a multi-group machine. Both directions are exact inverses.

/// Processors per Windows processor group.
pub const GROUP_SIZE: usize = 64;

/// Why a (group, index) pair has no CPU id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WindowsGroupError {
    /// The index is not below 64.
    #[error("processor index {index} in group {group} is out of range (a group holds at most 64 processors, indices 0-63)")]
    IndexOutOfRange {
        /// The group.
        group: usize,
        /// The bad index.
        index: usize,
    },
    /// `group * 64 + index` does not fit in a CPU id.
    #[error(
        "processor group {group} is too large: its CPU ids exceed the supported maximum {max}"
    )]
    GroupOutOfRange {
        /// The bad group.
        group: usize,
        /// The largest CPU id supported.
        max: usize,
    },
}

/// The CPU id of processor `index` of Windows processor group `group`: `group * 64 + index`.
pub fn to_cpu_id(group: usize, index: usize) -> Result<usize, WindowsGroupError> {
    if index >= GROUP_SIZE {
        return Err(WindowsGroupError::IndexOutOfRange { group, index });
    }
    let max = crate::cpuset::MAX_CPU_ID;
    group
        .checked_mul(GROUP_SIZE)
        .and_then(|base| base.checked_add(index))
        .filter(|&id| id <= max)
        .ok_or(WindowsGroupError::GroupOutOfRange { group, max })
}

/// The (group, index) of a CPU id: `(id / 64, id % 64)`.
pub fn from_cpu_id(id: usize) -> (usize, usize) {
    (id / GROUP_SIZE, id % GROUP_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kep_examples() {
        assert_eq!(to_cpu_id(0, 0), Ok(0));
        assert_eq!(to_cpu_id(0, 63), Ok(63));
        assert_eq!(to_cpu_id(1, 0), Ok(64));
        assert_eq!(to_cpu_id(2, 5), Ok(133));
        assert_eq!(from_cpu_id(64), (1, 0));
        assert_eq!(from_cpu_id(133), (2, 5));
        assert_eq!(from_cpu_id(63), (0, 63));
    }

    #[test]
    fn rejects_bad_indices_and_groups() {
        assert_eq!(
            to_cpu_id(1, 64),
            Err(WindowsGroupError::IndexOutOfRange {
                group: 1,
                index: 64
            })
        );
        let e = to_cpu_id(0, 100).unwrap_err().to_string();
        assert!(e.contains("100") && e.contains("0-63"), "{e}");
        assert!(matches!(
            to_cpu_id(usize::MAX, 0),
            Err(WindowsGroupError::GroupOutOfRange { .. })
        ));
        assert!(to_cpu_id(crate::cpuset::MAX_CPU_ID / 64 + 1, 0).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(group in 0usize..16384, index in 0usize..64) {
            let id = to_cpu_id(group, index).unwrap();
            prop_assert_eq!(from_cpu_id(id), (group, index));
        }

        #[test]
        fn round_trip_from_id(id in 0usize..=crate::cpuset::MAX_CPU_ID) {
            let (g, i) = from_cpu_id(id);
            prop_assert_eq!(to_cpu_id(g, i), Ok(id));
        }
    }
}
