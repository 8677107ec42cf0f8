// Package docs holds no code: its test ties the documentation to the code,
// so that every link to a section of a page under docs/ — from Go, shell
// and YAML comments, and from the Markdown pages themselves — names a
// heading that exists (GitHub's anchor of it).
package docs
