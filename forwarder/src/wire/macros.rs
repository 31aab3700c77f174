//! The one macro of the wire module.

/// Declares a protocol-number enum: the named values, plus `Unknown(raw)` for any other, with
/// `From` conversions both ways (so parsing a field never fails and emitting never loses it).
macro_rules! wire_enum {
    (
        $(#[$enum_attr:meta])*
        pub enum $name:ident($ty:ty) {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident = $value:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $(
                $(#[$variant_attr])*
                $variant,
            )+
            /// A value without a name here, kept as read.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            #[inline(always)]
            fn from(value: $ty) -> Self {
                match value {
                    $($value => $name::$variant,)+
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            #[inline(always)]
            fn from(value: $name) -> Self {
                match value {
                    $($name::$variant => $value,)+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}
